#!/usr/bin/env bash
# Install the official MCP TypeScript SDK (npm: @modelcontextprotocol/sdk, the version pinned in
# tests/integration/mcp_sdk/package.json) into build/mcp-sdk, for test_mcp.py's real-client test.
#   scripts/install-mcp-sdk.sh              install (again)
#   scripts/install-mcp-sdk.sh --if-missing only when that version is not there; quiet then
# Without node and npm it says so and installs nothing: the test then says it skipped.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/tests/integration/mcp_sdk/package.json
dest=$root/build/mcp-sdk
want=$(sed -n 's/.*"@modelcontextprotocol\/sdk": *"\([^"]*\)".*/\1/p' "$src")
have=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' \
	"$dest/node_modules/@modelcontextprotocol/sdk/package.json" 2>/dev/null | head -1 || true)

if [ "${1:-}" = "--if-missing" ] && [ "$have" = "$want" ]; then
	exit 0
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "install-mcp-sdk: node and npm are not installed: test_mcp's test with the" \
		"TypeScript SDK will be skipped" >&2
	exit 0
fi
mkdir -p "$dest"
cp "$src" "$dest/package.json"
echo "install-mcp-sdk: npm install @modelcontextprotocol/sdk@$want into build/mcp-sdk" >&2
(cd "$dest" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
