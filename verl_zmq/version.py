"""The package's version, in a module of its own: what reads it (the registry's
version check, `verl-launch --version`, the build) does not import the package's
entry points."""

__version__ = "0.1.0"
