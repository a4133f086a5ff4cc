"""docs/embedding.md's broker example (marked `<!-- example: broker -->`),
run as written: it serves, a client connects, and `await broker.shutdown()`
stops it -- the port is closed afterwards."""
import asyncio
import os
import re
import socket

import pytest

pytestmark = pytest.mark.amqtt          # the example serves amqtt's broker in-process

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "embedding.md")


def _example(name):
    text = open(DOC, encoding="utf-8").read()
    m = re.search(r"<!-- example: " + re.escape(name) + r" -->\s*```python\n(.*?)```", text, re.S)
    assert m, f"docs/embedding.md has no example {name!r}"
    return m.group(1)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_broker_example_starts_and_shuts_down():
    pytest.importorskip("amqtt", reason="the example needs amqtt (pip install 'fastsub[amqtt]')")
    ns = {"__name__": "__doc_example__"}
    exec(compile(_example("broker"), "docs/embedding.md:broker", "exec"), ns)
    port = _free_port()

    async def run():
        stop = asyncio.Event()
        task = asyncio.create_task(ns["serve"](stop, f"127.0.0.1:{port}"))
        for _ in range(200):                       # until it listens
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        else:
            pytest.fail("the broker never listened")
        stop.set()
        await asyncio.wait_for(task, 30)
        with pytest.raises(OSError):               # shut down: nothing listens
            await asyncio.open_connection("127.0.0.1", port)

    asyncio.run(run())
