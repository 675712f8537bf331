"""Watch a typed object fill in while it streams, then get the validated instance.

Runs against the embedded server, so it works offline:  python examples/structured_output.py
The server builds tool arguments from the tool's JSON schema, so this asks for the object as a
tool call (the same code reads ``response_format`` content: ``StructuredTracker(Forecast)``).
"""

from __future__ import annotations

from typing import Literal

import anyio
from pydantic import BaseModel

import fluxstream
from fluxstream.server import serve
from fluxstream.structured import StructuredTracker, strict_json_schema


class Forecast(BaseModel):
    city: str
    days: int
    unit: Literal["C", "F"]
    notes: list[str]


TOOL = {"type": "function", "function": {
    "name": "forecast", "parameters": strict_json_schema(Forecast), "strict": True}}


async def main() -> None:
    async with serve(port=0) as server:
        async with fluxstream.AsyncClient(base_url=server.base_url, api_key="sk-local") as client:
            tracker = StructuredTracker(tools={"forecast": Forecast})
            messages = [{"role": "user", "content": "Weather in Zürich?"}]
            async with client.chat.stream(model="flux-demo", messages=messages,
                                          tools=[TOOL]) as stream:
                async for event in stream:
                    changed = tracker.feed(event)
                    if changed is not None:
                        # a live, typed partial Forecast: only the fields that arrived are set
                        print("partial:", changed.value.model_dump(exclude_unset=True))
            result = tracker.call_result(0, 0)  # raises fluxstream.ParseError on bad output
            print("complete:" if result.complete else f"partial ({result.reason}):",
                  repr(result.value))


if __name__ == "__main__":
    anyio.run(main)
