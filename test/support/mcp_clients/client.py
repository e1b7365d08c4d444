"""Drive an ExBashkit MCP server with the official Python SDK (`mcp` on PyPI).

    client.py stdio <root> [history]   spawn `mix ex_bashkit.mcp` in <root>
    client.py http <url> [history]     connect to a Streamable HTTP endpoint

Runs one scenario (`history`: the history tools' one, against a server
that serves them) and prints what it saw as one JSON object on stdout
(test/ex_bashkit/mcp/clients_test.exs asserts on it).
"""

import json
import os
import sys

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError


def answer(result):
    """A tools/call result: the tool's JSON map, and isError."""
    return {"answer": json.loads(result.content[0].text), "is_error": result.is_error,
            "structured": result.structured_content}


async def scenario(server):
    seen = {}
    async with Client(server) as client:
        seen["server_name"] = client.server_info.name if client.server_info else None
        seen["protocol_version"] = client.protocol_version
        seen["tools"] = sorted(tool.name for tool in (await client.list_tools()).tools)

        await client.call_tool("bash", {"commands": "mkdir -p /work && cd /work && x=41"})
        seen["second_bash"] = answer(await client.call_tool("bash", {"commands": "echo $((x + 1)); pwd"}))

        seen["write"] = answer(await client.call_tool("write_file", {"path": "notes/a.txt", "content": "hello\n"}))
        seen["read"] = answer(await client.call_tool("read_file", {"path": "/work/notes/a.txt"}))

        seen["timeout"] = answer(await client.call_tool(
            "bash", {"commands": "echo partial; sleep 10", "timeout_ms": 300}))

        # Cancelled by the caller: the SDK sends notifications/cancelled.
        with anyio.move_on_after(1.5) as scope:
            await client.call_tool("bash", {"commands": "sleep 30; touch /work/after"})
        seen["cancelled"] = scope.cancelled_caught
        seen["after_cancel"] = answer(await client.call_tool(
            "bash", {"commands": "test -e /work/after && echo ran || echo stopped; echo $x"}))

        try:
            await client.call_tool("no_such_tool", {})
            seen["unknown_tool"] = None
        except MCPError as e:
            seen["unknown_tool"] = e.code
    print(json.dumps(seen))


async def history(server):
    """An agent's undo: commit, change, diff, checkout, log."""
    seen = {}
    async with Client(server) as client:
        seen["tools"] = sorted(tool.name for tool in (await client.list_tools()).tools)
        await client.call_tool("write_file", {"path": "/work/f", "content": "v1\n"})
        seen["commit"] = answer(await client.call_tool("commit", {"message": "v1"}))
        commit = seen["commit"]["answer"]["id"]
        await client.call_tool("bash", {"commands": "echo v2 > /work/f; echo new > /work/g; export X=2"})
        seen["diff"] = answer(await client.call_tool("diff", {"from": commit}))
        seen["checkout"] = answer(await client.call_tool("checkout", {"id": commit}))
        seen["after"] = answer(await client.call_tool(
            "bash", {"commands": "cat /work/f; test -e /work/g || echo no g; echo \"X=$X\""}))
        seen["log"] = answer(await client.call_tool("log", {"limit": 5}))
        seen["bad_checkout"] = answer(await client.call_tool("checkout", {"id": "0" * 64}))
    print(json.dumps(seen))


def main():
    transport, target = sys.argv[1], sys.argv[2]
    chosen = history if sys.argv[3:] == ["history"] else scenario
    if transport == "stdio":
        args = ["ex_bashkit.mcp"] + (["--history"] if chosen is history else [])
        server = StdioServerParameters(command="mix", args=args, env=dict(os.environ), cwd=target)
    else:
        server = target
    anyio.run(chosen, server)


if __name__ == "__main__":
    main()
