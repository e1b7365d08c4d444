// Drive an ExBashkit MCP server with the official TypeScript SDK
// (@modelcontextprotocol/sdk on npm).
//
//   node client.mjs stdio <root> [history]   spawn `mix ex_bashkit.mcp` in <root>
//   node client.mjs http <url> [history]     connect to a Streamable HTTP endpoint
//
// MCP_SDK_DIR names the SDK's installed package directory. Runs one
// scenario (`history`: the history tools' one, against a server that
// serves them) and prints what it saw as one JSON object on stdout
// (test/ex_bashkit/mcp/clients_test.exs asserts on it).

import { join } from "node:path";
import { pathToFileURL } from "node:url";

const sdk = (file) => import(pathToFileURL(join(process.env.MCP_SDK_DIR, "dist/esm", file)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");

const [transportName, target, scenario] = process.argv.slice(2);
const history = scenario === "history";
const mixArgs = ["ex_bashkit.mcp", ...(history ? ["--history"] : [])];
const transport =
  transportName === "stdio"
    ? new StdioClientTransport({ command: "mix", args: mixArgs, cwd: target, env: process.env, stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(target));

const answer = (result) => ({
  answer: JSON.parse(result.content[0].text),
  is_error: result.isError ?? false,
  structured: result.structuredContent ?? null,
});

const client = new Client({ name: "ex-bashkit-test", version: "1.0.0" });
await client.connect(transport);
const seen = {};
seen.server_name = client.getServerVersion()?.name ?? null;
seen.tools = (await client.listTools()).tools.map((tool) => tool.name).sort();

const call = (name, args, options) => client.callTool({ name, arguments: args }, undefined, options);

if (history) {
  // An agent's undo: commit, change, diff, checkout, log.
  await call("write_file", { path: "/work/f", content: "v1\n" });
  seen.commit = answer(await call("commit", { message: "v1" }));
  const commit = seen.commit.answer.id;
  await call("bash", { commands: "echo v2 > /work/f; echo new > /work/g; export X=2" });
  seen.diff = answer(await call("diff", { from: commit }));
  seen.checkout = answer(await call("checkout", { id: commit }));
  seen.after = answer(
    await call("bash", { commands: 'cat /work/f; test -e /work/g || echo no g; echo "X=$X"' })
  );
  seen.log = answer(await call("log", { limit: 5 }));
  seen.bad_checkout = answer(await call("checkout", { id: "0".repeat(64) }));
} else {
  await call("bash", { commands: "mkdir -p /work && cd /work && x=41" });
  seen.second_bash = answer(await call("bash", { commands: "echo $((x + 1)); pwd" }));

  seen.write = answer(await call("write_file", { path: "notes/a.txt", content: "hello\n" }));
  seen.read = answer(await call("read_file", { path: "/work/notes/a.txt" }));

  seen.timeout = answer(await call("bash", { commands: "echo partial; sleep 10", timeout_ms: 300 }));

  // Aborted by the caller: the SDK sends notifications/cancelled.
  const abort = new AbortController();
  setTimeout(() => abort.abort("test cancels"), 1500);
  try {
    await call("bash", { commands: "sleep 30; touch /work/after" }, { signal: abort.signal });
    seen.cancelled = false;
  } catch (error) {
    seen.cancelled = abort.signal.aborted;
  }
  seen.after_cancel = answer(
    await call("bash", { commands: "test -e /work/after && echo ran || echo stopped; echo $x" })
  );

  try {
    await call("no_such_tool", {});
    seen.unknown_tool = null;
  } catch (error) {
    seen.unknown_tool = error.code ?? String(error);
  }
}

if (transportName === "http") await transport.terminateSession();
await client.close();
console.log(JSON.stringify(seen));
