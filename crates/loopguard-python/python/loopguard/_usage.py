"""What a model response used, reported to the guard by the framework adapters."""

from __future__ import annotations

import warnings
from typing import Any, Optional


def record_usage(
    guard: Any,
    *,
    session: str,
    run: Optional[str],
    agent: Optional[str],
    id: Optional[str],
    model: Any,
    input_tokens: Optional[int],
    output_tokens: Optional[int],
    cache_read_tokens: Optional[int],
    cache_write_tokens: Optional[int],
    parent_session: Optional[str] = None,
    parent_run: Optional[str] = None,
) -> None:
    """Reports one response's usage. LangChain, the OpenAI Agents SDK and Pydantic AI count
    cached input inside ``input_tokens``; loopguard counts it apart. A usage the guard
    refuses is a warning, not an error: the agent's run goes on."""
    cache_read = int(cache_read_tokens or 0)
    cache_write = int(cache_write_tokens or 0)
    try:
        guard.record_usage(
            session=session,
            run=run,
            agent=agent,
            id=id,
            model=model if isinstance(model, str) and model else None,
            input_tokens=max(int(input_tokens or 0) - cache_read - cache_write, 0),
            output_tokens=int(output_tokens or 0),
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            parent_session=parent_session,
            parent_run=parent_run,
        )
    except ValueError as e:
        warnings.warn(f"loopguard: usage not counted: {e}", stacklevel=3)
