// A facilitator made of the x402 TypeScript SDK's own parts (@x402/core/facilitator with the
// exact SVM scheme of @x402/svm), served over HTTP with Express as x402's HTTP facilitators
// are: GET /supported, POST /verify, POST /settle.
//
//   node ts_facilitator.mjs --keypair FILE --rpc URL --network CAIP2 [--host H] [--port P]
//
// The keypair is the fee payer (it co-signs and sends). Prints
// `x402-ts facilitator ready http://host:port`.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import express from "express";
import { createKeyPairSignerFromBytes } from "@solana/kit";
import { x402Facilitator } from "@x402/core/facilitator";
import { toFacilitatorSvmSigner } from "@x402/svm";
import { registerExactSvmScheme } from "@x402/svm/exact/facilitator";

const { values } = parseArgs({
  options: {
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string", default: "0" },
    keypair: { type: "string" },
    rpc: { type: "string" },
    network: { type: "string" },
  },
});

const secret = Uint8Array.from(JSON.parse(readFileSync(values.keypair, "utf8")));
const keypair = await createKeyPairSignerFromBytes(secret);
const signer = toFacilitatorSvmSigner(keypair, { defaultRpcUrl: values.rpc });
const facilitator = registerExactSvmScheme(new x402Facilitator(), {
  signer,
  networks: values.network,
});

const app = express();
app.use(express.json({ limit: "1mb" }));
app.get("/supported", (req, res) => res.json(facilitator.getSupported()));
for (const [path, act, failed] of [
  ["/verify", (p, r) => facilitator.verify(p, r), (reason) => ({ isValid: false, invalidReason: reason })],
  ["/settle", (p, r) => facilitator.settle(p, r), (reason) => ({ success: false, errorReason: reason, transaction: "", network: values.network })],
]) {
  app.post(path, async (req, res) => {
    const { paymentPayload, paymentRequirements } = req.body ?? {};
    if (!paymentPayload || !paymentRequirements) {
      res.status(400).json({ error: "paymentPayload and paymentRequirements are required" });
      return;
    }
    try {
      res.json(await act(paymentPayload, paymentRequirements));
    } catch (error) {
      const reason = error?.invalidReason ?? error?.errorReason ?? String(error?.message ?? error);
      res.json(failed(reason));
    }
  });
}
const listener = app.listen(Number(values.port), values.host, () => {
  const { port } = listener.address();
  console.log(`x402-ts facilitator ready http://${values.host}:${port}`);
});
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => listener.close(() => process.exit(0)));
}
