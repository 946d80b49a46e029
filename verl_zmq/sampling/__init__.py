"""What samplers do besides I/O: step a vector env and cut fragments
(`collector`), and pace themselves by the learner's consumption (`pacing`)."""
