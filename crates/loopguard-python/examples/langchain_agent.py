"""A LangChain agent with loopguard (needs `pip install loopguard[langchain]` and a model)."""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.tools import tool

from loopguard import Guard
from loopguard.langchain import LoopGuardMiddleware


@tool
def read_file(path: str) -> str:
    """Read a file."""
    with open(path, encoding="utf-8") as f:
        return f.read()


agent = create_agent(
    "openai:gpt-5-mini",
    [read_file],
    middleware=[LoopGuardMiddleware(Guard({"tools": {"loopDetection": {"enabled": True}}}))],
)

if __name__ == "__main__":
    print(agent.invoke({"messages": [{"role": "user", "content": "Summarize notes.txt"}]})["messages"][-1].content)
