"""Tools of a user's own for the tests: imported only inside the sandbox that runs
them (keep this module light: every call imports it afresh)."""

from __future__ import annotations


class Counter:
    """A tool of one's own: counts its calls within one trajectory."""

    name = "count"

    def describe(self):
        return {"type": "function", "function": {"name": self.name, "parameters": {}}}

    def start(self):
        return {"n": 0}

    def call(self, arguments, state):
        state["n"] += 1
        if arguments.get("fail"):
            raise RuntimeError("asked to fail")
        return str(state["n"])


class NotATool:
    name = "x"


class Hostile:
    """A tool that does, on request, what a sandbox must stop."""

    name = "hostile"

    def describe(self):
        return {"type": "function", "function": {"name": self.name, "parameters": {}}}

    def start(self):
        return {}

    def call(self, arguments, state):
        import os
        import socket

        what = arguments["do"]
        if what == "loop":
            while True:
                pass
        if what == "memory":
            return str(len(bytearray(10 * 2**30)))
        if what == "fork":
            while True:
                os.fork()
        if what == "write":
            with open("/tmp/verl-tool-escaped", "w") as f:
                f.write("out")
            return "wrote"
        if what == "socket":
            socket.create_connection(("1.1.1.1", 53), timeout=2).close()
            return "connected"
        return "fine"
