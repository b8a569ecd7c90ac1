// An MCP server (@modelcontextprotocol/sdk's McpServer on its streamable HTTP transport,
// stateless) with one tool paid by MPP charge through mppx's MCP SDK transport
// (Transport.mcpSdk from mppx/server) and @solana/mpp's server charge:
//
//   node mppx_server.mjs --rpc URL --recipient WALLET --mint MINT --decimals N --price N
//                        --network NAME --keypair FILE [--host H] [--port P]
//
// `forecast` costs N base units of MINT, paid to WALLET's associated token account; the
// server's key (FILE) pays the fees (`feePayer: true`), co-signs and sends the payer's
// transaction with the RPC, then checks it there. Unpaid, the tool answers MPP's -32042
// error; paid, its result carries `_meta["org.paymentauth/receipt"]`. `free` costs
// nothing. Prints `mppx server ready http://host:port/mcp`.
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { parseArgs } from "node:util";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { createKeyPairSignerFromBytes } from "@solana/kit";
import { solana } from "@solana/mpp/server";
import { Mppx, Transport } from "mppx/server";
import { z } from "zod";

const REQUIRED = ["rpc", "recipient", "mint", "price", "network", "keypair"];
const { values } = parseArgs({
  options: {
    ...Object.fromEntries(REQUIRED.map((name) => [name, { type: "string" }])),
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string", default: "0" },
    decimals: { type: "string", default: "6" },
  },
});
for (const name of REQUIRED) {
  if (values[name] === undefined) throw new Error(`--${name} is required`);
}

const secret = Uint8Array.from(JSON.parse(readFileSync(values.keypair, "utf8")));
const payment = Mppx.create({
  methods: [
    solana.charge({
      recipient: values.recipient,
      currency: values.mint,
      decimals: Number(values.decimals),
      network: values.network,
      rpcUrl: values.rpc,
      signer: await createKeyPairSignerFromBytes(secret),
    }),
  ],
  realm: "mppx-interop",
  secretKey: "svcpay-mppx-interop-secret-0123456789",
  transport: Transport.mcpSdk(),
});

function tools() {
  const server = new McpServer({ name: "mppx-weather", version: "1.0.0" });
  server.registerTool(
    "forecast",
    { description: "a paid forecast", inputSchema: { city: z.string() } },
    async ({ city }, extra) => {
      const result = await payment.charge({ amount: values.price })(extra);
      if (result.status === 402) throw result.challenge;
      return result.withReceipt({ content: [{ type: "text", text: `sunny in ${city}` }] });
    },
  );
  server.registerTool(
    "free",
    { description: "a free forecast", inputSchema: { city: z.string() } },
    async ({ city }) => ({ content: [{ type: "text", text: `cloudy in ${city}` }] }),
  );
  return server;
}

const listener = createServer(async (req, res) => {
  if (req.url !== "/mcp" || req.method !== "POST") {
    res.writeHead(405).end();
    return;
  }
  const server = tools();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on("close", () => {
    transport.close();
    server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res);
});
listener.listen(Number(values.port), values.host, () => {
  const { port } = listener.address();
  console.log(`mppx server ready http://${values.host}:${port}/mcp`);
});
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => listener.close(() => process.exit(0)));
}
