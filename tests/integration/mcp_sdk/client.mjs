// A real MCP client for test_mcp.py: the official TypeScript SDK's Client over its stdio
// transport, driving `probing mcp` as an MCP host would.
//   node client.mjs SDK_DIR PLAN_JSON
// SDK_DIR: where scripts/install-mcp-sdk.sh installed the SDK (its node_modules). PLAN_JSON:
// {"command": [argv...], "calls": [{"name", "arguments", "timeout_ms", "progress"}]}: each
// call made with the SDK's callTool, in order; "progress": true passes onprogress with
// resetTimeoutOnProgress (the request then has a progressToken). Prints one JSON object:
// {"server", "tools", "results": [{"result"} or {"error": {"code", "message"}}, with
// "progress": the notifications' params, "ms": how long it took]}.
import { pathToFileURL } from "node:url";
import path from "node:path";

const [sdkDir, planText] = process.argv.slice(2);
const plan = JSON.parse(planText);
const sdk = (p) => import(pathToFileURL(path.join(sdkDir, "node_modules/@modelcontextprotocol/sdk/dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const transport = new StdioClientTransport({
  command: plan.command[0], args: plan.command.slice(1), stderr: "inherit",
});
const client = new Client({ name: "probing-test", version: "1.0.0" });
await client.connect(transport);
const out = { server: client.getServerVersion(), tools: (await client.listTools()).tools, results: [] };
for (const c of plan.calls) {
  const progress = [];
  const opts = {};
  if (c.timeout_ms) opts.timeout = c.timeout_ms;
  if (c.progress) {
    opts.onprogress = (p) => progress.push(p);
    opts.resetTimeoutOnProgress = true;
  }
  const t0 = Date.now();
  try {
    const result = await client.callTool({ name: c.name, arguments: c.arguments }, undefined, opts);
    out.results.push({ result, progress, ms: Date.now() - t0 });
  } catch (e) {
    out.results.push({ error: { code: e.code ?? null, message: String(e.message ?? e) }, progress, ms: Date.now() - t0 });
  }
}
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
