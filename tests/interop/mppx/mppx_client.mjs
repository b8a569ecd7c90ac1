// mppx's MCP client (McpClient.wrap from mppx/mcp/client) paying with @solana/mpp's charge,
// on @modelcontextprotocol/sdk's client over streamable HTTP, calling one tool:
//
//   node mppx_client.mjs URL --tool NAME --arguments JSON --keypair FILE --rpc URL
//                        [--await-finalized]
//
// URL is the MCP endpoint. The wrapped callTool pays a payment-required answer (MPP's
// -32042 error, or a tool result with `_meta["org.paymentauth/payment-required"]`) by
// building the Solana charge with the given RPC, then calls the tool again with the
// credential in `_meta["org.paymentauth/credential"]`. Prints one JSON object: the
// result (isError, content, structuredContent, _meta), `receipt` (what mppx read from
// `_meta["org.paymentauth/receipt"]`) and `challenge` (the one it chose to pay, or null).
// A call mppx cannot pay exits 1 with {"error": ...}. With --await-finalized, the payment
// waits until the challenge's recentBlockhash is finalized: @solana/mpp 0.6.0's server
// offers a `confirmed` one and preflights its send at the RPC's default, `finalized`, so
// its own client's payment is otherwise refused ("Blockhash not found") on a validator
// whose finalized root lags, as Agave's does (~13 s).
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { createKeyPairSignerFromBytes, createSolanaRpc } from "@solana/kit";
import { solana } from "@solana/mpp/client";
import { McpClient } from "mppx/mcp/client";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    tool: { type: "string" },
    arguments: { type: "string", default: "{}" },
    keypair: { type: "string" },
    rpc: { type: "string" },
    "await-finalized": { type: "boolean", default: false },
  },
});

async function finalized(blockhash) {
  const rpc = createSolanaRpc(values.rpc);
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const valid = await rpc.isBlockhashValid(blockhash, { commitment: "finalized" }).send();
    if (valid.value) return;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new Error(`the blockhash ${blockhash} was not finalized in 60 s`);
}

async function main() {
  const secret = Uint8Array.from(JSON.parse(readFileSync(values.keypair, "utf8")));
  const signer = await createKeyPairSignerFromBytes(secret);
  const client = new Client({ name: "mppx-interop", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(positionals[0])));
  let chosen = null;
  McpClient.wrap(client, {
    methods: [solana.charge({ signer, rpcUrl: values.rpc })],
    onPaymentRequired: async (challenge) => {
      chosen = challenge;
      const blockhash = challenge.request?.methodDetails?.recentBlockhash;
      if (values["await-finalized"] && blockhash) await finalized(blockhash);
      return true;
    },
  });
  try {
    const result = await client.callTool({
      name: values.tool,
      arguments: JSON.parse(values.arguments),
    });
    console.log(
      JSON.stringify({
        isError: result.isError ?? false,
        content: result.content,
        structuredContent: result.structuredContent ?? null,
        _meta: result._meta ?? {},
        receipt: result.receipt ?? null,
        challenge: chosen,
      }),
    );
    return 0;
  } catch (error) {
    const detail = { error: String(error?.message ?? error), challenge: chosen };
    if (error?.code !== undefined) Object.assign(detail, { code: error.code, data: error.data });
    console.log(JSON.stringify(detail));
    return 1;
  } finally {
    await client.close();
  }
}

process.exitCode = await main();
