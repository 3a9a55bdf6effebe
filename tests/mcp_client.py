"""An independent MCP client session against `kidiom mcp`, using the official
Python SDK (PyPI `mcp`). Prints a transcript; exits non-zero on any surprise.

Usage: python mcp_client.py KIDIOM_BIN WORKSPACE_ROOT CATALOG_DB
"""
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def g(obj, snake):
    """SDK 1.x spells fields in camelCase, 2.x in snake_case."""
    if hasattr(obj, snake):
        return getattr(obj, snake)
    head, *rest = snake.split("_")
    return getattr(obj, head + "".join(w.title() for w in rest))


def show(label, value):
    text = value if isinstance(value, str) else json.dumps(value, indent=None, default=str)
    print(f"{label}: {text[:300]}")


async def main(kidiom, root, db):
    params = StdioServerParameters(command=kidiom, args=["mcp", "--root", root, "--db", db])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            show("initialize", {"server": g(init, "server_info").name, "protocol": g(init, "protocol_version")})
            assert g(init, "server_info").name == "kidiom"

            tools = await session.list_tools()
            names = sorted(t.name for t in tools.tools)
            show("tools/list", names)
            assert "search_patterns" in names and "validate_candidate" in names

            found = await session.call_tool("search_patterns", {"query": "input_precision"})
            show("search_patterns", g(found, "structured_content"))
            assert not g(found, "is_error")
            ids = [p["id"] for p in g(found, "structured_content")["patterns"]]
            assert "py-keyword-tl-dot-input-precision" in ids

            pattern = await session.call_tool("get_pattern", {"id": "py-keyword-tl-dot-input-precision"})
            show("get_pattern", g(pattern, "structured_content")["values"])
            assert g(pattern, "structured_content")["values"][0]["value"] == '"ieee"'

            targets = await session.call_tool("list_targets", {})
            show("list_targets", g(targets, "structured_content"))
            assert g(targets, "structured_content")["targets"][0]["path"] == "kernels/k.py"

            proposed = await session.call_tool("propose_rewrite", {"pattern_ids": ["py-keyword-tl-dot-input-precision"]})
            cand = g(proposed, "structured_content")["candidates"][0]
            show("propose_rewrite", cand["diff"])
            assert 'input_precision="ieee"' in cand["diff"]

            evidence = await session.call_tool("get_evidence", {"id": cand["id"]})
            show("get_evidence", {"id": g(evidence, "structured_content")["id"], "status": g(evidence, "structured_content")["status"]})

            refused = await session.call_tool("accept_candidate", {"id": cand["id"]})
            show("accept_candidate (read-only server)", refused.content[0].text)
            assert g(refused, "is_error") and "--allow-write" in refused.content[0].text

            outside = await session.call_tool("list_targets", {"path": "/"})
            show("list_targets outside", outside.content[0].text)
            assert g(outside, "is_error")

            try:
                await session.call_tool("no_such_tool", {})
                raise AssertionError("unknown tool accepted")
            except Exception as e:  # the SDK raises on a JSON-RPC error
                show("unknown tool", str(e))

            res = await session.list_resources()
            show("resources/list", [str(r.uri) for r in res.resources])
            stats = await session.read_resource("kidiom://catalog/stats")
            show("resources/read", stats.contents[0].text)
    print("transcript ok")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
