"""Watch a typed object fill in while it streams, then get the validated instance.

Runs against the embedded server, so it works offline:  python examples/structured_output.py
The server answers ``response_format`` (and Anthropic's forced tool) with JSON that fits the
schema, streamed in small pieces.
"""

from __future__ import annotations

from typing import Literal

import anyio
from pydantic import BaseModel

import fluxstream
from fluxstream.server import serve


class Day(BaseModel):
    summary: str
    high: int


class Forecast(BaseModel):
    """A weather forecast."""

    city: str
    unit: Literal["C", "F"]
    days: list[Day]


async def main() -> None:
    async with serve(port=0, faults="drip=0.004") as server:  # events paced like a model
        async with fluxstream.AsyncClient(base_url=server.base_url, api_key="sk-local") as client:
            messages = [{"role": "user", "content": "Weather in Zürich?"}]
            # The model class is the whole interface: the request carries its strict JSON
            # schema, the stream hands out typed partial objects (at most one per 16 ms frame).
            async with client.chat.stream(model="flux-demo", messages=messages,
                                          response_format=Forecast) as stream:
                async for forecast in stream.objects(coalesce=0.016):
                    # A partial Forecast: only the fields that arrived are set; strings and
                    # lists grow; a value once complete never changes.
                    print("partial:", forecast.model_dump(exclude_unset=True))
            result = stream.parsed  # raises fluxstream.ParseError on output that is not valid
            print("complete:" if result.complete else f"partial ({result.reason}):",
                  repr(result.value))

            # Anthropic: the same model becomes a tool forced by tool_choice; its input is the
            # object. A reply cut by max_tokens is the last partial object, and says so.
            reply = await client.messages.complete(model="flux-demo", messages=messages,
                                                   max_tokens=20, response_format=Forecast)
            cut = reply.parse(Forecast)
            print(f"anthropic, max_tokens=20: complete={cut.complete} reason={cut.reason}",
                  cut.value.model_dump(exclude_unset=True) if cut.value else None)


if __name__ == "__main__":
    anyio.run(main)
