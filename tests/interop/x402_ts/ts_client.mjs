// The x402 TypeScript SDK's paying fetch (@x402/fetch + @x402/svm), as an agent uses it,
// against one URL:
//
//   node ts_client.mjs URL --keypair FILE --rpc URL --network CAIP2 --mint MINT [--replay]
//
// GETs URL through wrapFetchWithPayment (the SDK pays a 402 with the exact SVM scheme,
// building its transaction with the given RPC) and prints one JSON object, the same report
// as x402_sdk/sdk_client.py: status, paymentResponse (PAYMENT-RESPONSE decoded, or null),
// body, paymentHeaders (what the SDK sent to pay); with --replay, the same payment headers
// sent again without the SDK, in `replay`. A payment the SDK refuses to make exits 1 with
// {"error": ...}.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { createKeyPairSignerFromBytes } from "@solana/kit";
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { toClientSvmSigner } from "@x402/svm";
import { ExactSvmScheme } from "@x402/svm/exact/client";

const PAYMENT_HEADERS = ["payment-signature", "x-payment"];

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    keypair: { type: "string" },
    rpc: { type: "string" },
    network: { type: "string" },
    mint: { type: "string" },
    replay: { type: "boolean", default: false },
  },
});
const url = positionals[0];

async function outcome(reply) {
  const header = reply.headers.get("payment-response") ?? reply.headers.get("x-payment-response");
  const text = await reply.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return {
    status: reply.status,
    paymentResponse: header ? decodePaymentResponseHeader(header) : null,
    body,
  };
}

async function main() {
  const secret = Uint8Array.from(JSON.parse(readFileSync(values.keypair, "utf8")));
  const signer = toClientSvmSigner(await createKeyPairSignerFromBytes(secret));
  // The SDK pays only the USDC mints it knows unless told otherwise: allow the local one.
  const client = new x402Client()
    .register(values.network, new ExactSvmScheme(signer, { rpcUrl: values.rpc }))
    .setSpendControls({ allowedAssets: [{ network: values.network, asset: values.mint }] });

  const sent = [];
  const recording = async (input, init) => {
    const request = new Request(input, init);
    sent.push(request.headers);
    return fetch(request);
  };
  const paidFetch = wrapFetchWithPayment(recording, client);
  let reply;
  try {
    reply = await paidFetch(url);
  } catch (error) {
    console.log(JSON.stringify({ error: String(error?.message ?? error) }));
    return 1;
  }
  const result = await outcome(reply);
  const paid = sent.filter((h) => PAYMENT_HEADERS.some((name) => h.has(name)));
  const headers = {};
  if (paid.length) {
    for (const name of PAYMENT_HEADERS) {
      const value = paid.at(-1).get(name);
      if (value) headers[name] = value;
    }
  }
  result.paymentHeaders = headers;
  if (values.replay) {
    result.replay = await outcome(await fetch(url, { headers }));
  }
  console.log(JSON.stringify(result));
  return 0;
}

process.exitCode = await main();
