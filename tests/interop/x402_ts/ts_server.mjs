// An API sold with the x402 TypeScript SDK's Express middleware (@x402/express), settling
// through a given facilitator (the SDK's HTTPFacilitatorClient):
//
//   node ts_server.mjs --facilitator URL --pay-to WALLET --mint MINT --network CAIP2 --price N
//                      [--host H] [--port P]
//
// GET /paid costs N base units of MINT, paid to WALLET's associated token account with the
// exact scheme; GET /free is free. Prints `x402-ts server ready http://host:port`.
import { parseArgs } from "node:util";
import express from "express";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { ExactSvmScheme } from "@x402/svm/exact/server";

const { values } = parseArgs({
  options: {
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string", default: "0" },
    facilitator: { type: "string" },
    "pay-to": { type: "string" },
    mint: { type: "string" },
    network: { type: "string" },
    price: { type: "string" },
  },
});

const facilitator = new HTTPFacilitatorClient({ url: values.facilitator });
const server = new x402ResourceServer(facilitator).register(values.network, new ExactSvmScheme());
const routes = {
  "GET /paid": {
    accepts: {
      scheme: "exact",
      network: values.network,
      payTo: values["pay-to"],
      price: { amount: values.price, asset: values.mint }, // base units, not dollars
    },
    description: "a paid answer",
  },
};

const app = express();
app.use(paymentMiddleware(routes, server));
app.get("/paid", (req, res) => res.json({ answer: "paid content" }));
app.get("/free", (req, res) => res.json({ answer: "free content" }));
const listener = app.listen(Number(values.port), values.host, () => {
  const { port } = listener.address();
  console.log(`x402-ts server ready http://${values.host}:${port}`);
});
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => listener.close(() => process.exit(0)));
}
