"""A helper embedded into a test build of the agent (tests/tools/tools.mk) to check that any
injector/py/NAME.py is loaded with no C change: it registers a table and a request kind."""
import probing_agent as agent

agent.register_table("python", "extra_helper", [("word", "TEXT", "a word")],
                     lambda: [("loaded",), (__name__,)], "from the test helper")
agent.register_kind("extra.ping", lambda args: {"pong": True})
