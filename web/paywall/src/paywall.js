// The paywall's wallet script (issue 26, docs/adr/0032). The gate's HTML 402 carries the
// x402 terms in <script type="application/json" id="svcpay-paywall">; this script finds
// the Wallet Standard wallets in the page (Phantom, Solflare, Backpack, or a test wallet),
// connects one, builds the x402 `exact` payment the terms ask for (the same layout as
// svcpay.schemes.x402_exact.client: compute limit, compute price, TransferChecked, memo),
// has the wallet sign it as the token authority (the facilitator is the fee payer and signs
// when it settles), retries the request with it in PAYMENT-SIGNATURE and shows the answer.
// Where the route is sold by subscription, it also subscribes the wallet to the plan
// (svc_billing's `subscribe`: the first period charged now, renewals pulled by the
// facilitator) and retries the request with the subscription in X-Svc-Sub; a wallet that
// already holds a live subscription to the plan uses it.
// Without JavaScript the page still shows the terms: the section this fills stays hidden.
//
// Bundled with esbuild by scripts/build-paywall into py/svcpay/gate/static/paywall.js.

import { getWallets } from "@wallet-standard/app";
import {
  AccountRole,
  address,
  appendTransactionMessageInstructions,
  compileTransaction,
  createSolanaRpc,
  createTransactionMessage,
  getAddressDecoder,
  getAddressEncoder,
  getBase64Decoder,
  getBase64Encoder,
  getProgramDerivedAddress,
  getTransactionEncoder,
  pipe,
  setTransactionMessageFeePayer,
  setTransactionMessageLifetimeUsingBlockhash,
} from "@solana/kit";

const TOKEN_PROGRAM = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
const TOKEN_2022_PROGRAM = "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb";
const ASSOCIATED_TOKEN_PROGRAM = "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL";
const COMPUTE_BUDGET_PROGRAM = "ComputeBudget111111111111111111111111111111";
const MEMO_PROGRAM = "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr";
// svcpay.schemes.x402_exact.client's budget: the transfer and a memo use about 10,000 units,
// a Token-2022 transfer more; one micro-lamport a unit, the least a facilitator accepts.
const COMPUTE_UNIT_LIMIT = 20000;
const TOKEN_2022_COMPUTE_UNITS = 20000;
const COMPUTE_UNIT_PRICE = 1n;
// Token-2022 extensions this page cannot pay with (the svcpay client can): a transfer fee
// (the gross must be computed from this epoch's schedule) and a transfer hook (its extra
// accounts must be resolved).
const TRANSFER_FEE_CONFIG = 1;
const TRANSFER_HOOK = 14;
// x402's CAIP-2 networks -> Wallet Standard chains.
const CHAINS = {
  "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp": "solana:mainnet",
  "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1": "solana:devnet",
  "solana:4uhcVJyU9pJkvQyS88uRDiswHXSCkY3z": "solana:testnet",
};
const SYSTEM_PROGRAM = "11111111111111111111111111111111";
// svc_billing's `subscribe` (its IDL's discriminator) and account layouts.
const SUBSCRIBE = [254, 28, 191, 138, 156, 179, 183, 53];
const PLAN_MINT = 48; // after the discriminator, authority and plan_id
const PLAN_DESTINATION = 97; // after mint, decimals, amount and period_secs
const CONFIRM_PATIENCE_MS = 60000;
const CONNECT = "standard:connect";
const SIGN = "solana:signTransaction";

const $ = (id) => document.getElementById(id);

function status(text, kind = "info") {
  const out = $("svcpay-status");
  out.textContent = text;
  out.dataset.kind = kind;
}

function readConfig() {
  const node = $("svcpay-paywall");
  if (!node) return null;
  try {
    return JSON.parse(node.textContent);
  } catch {
    return null;
  }
}

/** The `exact` terms on Solana this page can pay, or null. */
function exactTerms(config) {
  const accepts = (config.required && config.required.accepts) || [];
  return accepts.find((a) => a.scheme === "exact" && String(a.network).startsWith("solana:")) || null;
}

function usable(wallet) {
  return CONNECT in wallet.features && SIGN in wallet.features;
}

function u32(value) {
  const bytes = new Uint8Array(4);
  new DataView(bytes.buffer).setUint32(0, value, true);
  return bytes;
}

function u64(value) {
  const bytes = new Uint8Array(8);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(value), true);
  return bytes;
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function randomMemo() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

async function ata(owner, mint, tokenProgram) {
  const encode = getAddressEncoder();
  const [found] = await getProgramDerivedAddress({
    programAddress: address(ASSOCIATED_TOKEN_PROGRAM),
    seeds: [encode.encode(owner), encode.encode(tokenProgram), encode.encode(mint)],
  });
  return found;
}

/** The mint's token program and decimals; an Error when this page cannot pay with it. */
async function readMint(rpc, mint) {
  const { value } = await rpc.getAccountInfo(mint, { encoding: "base64", commitment: "confirmed" }).send();
  if (!value) throw new Error(`there is no mint at ${mint} on this cluster`);
  const owner = value.owner;
  if (owner !== TOKEN_PROGRAM && owner !== TOKEN_2022_PROGRAM) throw new Error(`${mint} is no token mint`);
  const data = getBase64Encoder().encode(value.data[0]);
  if (data.length < 82) throw new Error(`${mint} is no token mint`);
  if (owner === TOKEN_2022_PROGRAM && data.length > 166) {
    // Extensions: TLV entries after the 165-byte base and the account-type byte.
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    for (let at = 166; at + 4 <= data.length; ) {
      const type = view.getUint16(at, true);
      const length = view.getUint16(at + 2, true);
      if (type === TRANSFER_FEE_CONFIG || type === TRANSFER_HOOK) {
        throw new Error("this token has a transfer fee or a transfer hook: pay with the svcpay client (below)");
      }
      at += 4 + length;
    }
  }
  return { tokenProgram: address(owner), decimals: data[44] };
}

function u64le(bytes, at) {
  return new DataView(bytes.buffer, bytes.byteOffset + at, 8).getBigUint64(0, true);
}

async function readAccount(rpc, key) {
  const { value } = await rpc.getAccountInfo(key, { encoding: "base64", commitment: "confirmed" }).send();
  if (!value) return null;
  return { owner: value.owner, data: getBase64Encoder().encode(value.data[0]) };
}

/** The plan's program (its owner), mint, decimals, price and destination. */
async function readPlan(rpc, plan) {
  const account = await readAccount(rpc, address(plan));
  if (!account) throw new Error(`there is no plan at ${plan} on this cluster`);
  const data = account.data;
  if (data.length < PLAN_DESTINATION + 32) throw new Error(`${plan} is no svc_billing plan`);
  const decode = (at) => getAddressDecoder().decode(data.subarray(at, at + 32));
  return {
    program: address(account.owner),
    mint: decode(PLAN_MINT),
    decimals: data[PLAN_MINT + 32],
    amount: u64le(data, PLAN_MINT + 33),
    destination: decode(PLAN_DESTINATION),
  };
}

async function pda(program, seeds) {
  const [found] = await getProgramDerivedAddress({ programAddress: program, seeds });
  return found;
}

/** "12.5" of a mint with `decimals` -> base units; an Error for anything else. */
function baseUnits(text, decimals) {
  const match = /^\s*(\d+)(?:\.(\d*))?\s*$/.exec(text);
  if (!match || (match[2] || "").length > decimals) throw new Error(`${text} is no amount with at most ${decimals} decimals`);
  return BigInt(match[1] + (match[2] || "").padEnd(decimals, "0"));
}

async function confirm(rpc, signature) {
  const deadline = Date.now() + CONFIRM_PATIENCE_MS;
  while (Date.now() < deadline) {
    const { value } = await rpc.getSignatureStatuses([signature]).send();
    const found = value[0];
    if (found && found.err) throw new Error(`the transaction failed: ${JSON.stringify(found.err, (_, v) => (typeof v === "bigint" ? Number(v) : v))}`);
    if (found && (found.confirmationStatus === "confirmed" || found.confirmationStatus === "finalized")) return;
    await new Promise((done) => setTimeout(done, 500));
  }
  throw new Error(`the transaction ${signature} was not confirmed within ${CONFIRM_PATIENCE_MS / 1000} s`);
}

async function buildPayment(config, terms, payer) {
  const extra = terms.extra || {};
  if (!extra.feePayer) throw new Error("the terms name no fee payer");
  const rpc = createSolanaRpc(config.rpc);
  const mint = address(terms.asset);
  const payTo = address(terms.payTo);
  const { tokenProgram, decimals } = await readMint(rpc, mint);
  const source = await ata(payer, mint, tokenProgram);
  const destination = await ata(payTo, mint, tokenProgram);
  const memo = new TextEncoder().encode(extra.memo || randomMemo());
  const limit = COMPUTE_UNIT_LIMIT + (tokenProgram === TOKEN_2022_PROGRAM ? TOKEN_2022_COMPUTE_UNITS : 0);
  const instructions = [
    { programAddress: address(COMPUTE_BUDGET_PROGRAM), data: concat([2], u32(limit)) },
    { programAddress: address(COMPUTE_BUDGET_PROGRAM), data: concat([3], u64(COMPUTE_UNIT_PRICE)) },
    {
      programAddress: tokenProgram,
      accounts: [
        { address: source, role: AccountRole.WRITABLE },
        { address: mint, role: AccountRole.READONLY },
        { address: destination, role: AccountRole.WRITABLE },
        { address: payer, role: AccountRole.READONLY_SIGNER },
      ],
      data: concat([12], u64(terms.amount), [decimals]),
    },
    { programAddress: address(MEMO_PROGRAM), data: memo },
  ];
  let lifetime;
  if (extra.recentBlockhash) {
    lifetime = { blockhash: extra.recentBlockhash, lastValidBlockHeight: 2n ** 63n };
  } else {
    lifetime = (await rpc.getLatestBlockhash({ commitment: "confirmed" }).send()).value;
  }
  const message = pipe(
    createTransactionMessage({ version: 0 }),
    (m) => setTransactionMessageFeePayer(address(extra.feePayer), m),
    (m) => setTransactionMessageLifetimeUsingBlockhash(lifetime, m),
    (m) => appendTransactionMessageInstructions(instructions, m),
  );
  return new Uint8Array(getTransactionEncoder().encode(compileTransaction(message)));
}

function paymentHeader(config, terms, signed) {
  const transaction = getBase64Decoder().decode(signed);
  const required = config.required;
  const payload =
    required.x402Version === 1
      ? { x402Version: 1, scheme: terms.scheme, network: terms.network, payload: { transaction } }
      : { x402Version: 2, accepted: terms, resource: required.resource, payload: { transaction } };
  const name = required.x402Version === 1 ? "X-PAYMENT" : "PAYMENT-SIGNATURE";
  const json = new TextEncoder().encode(JSON.stringify(payload));
  return [name, getBase64Decoder().decode(json)];
}

function settlementOf(response) {
  const header = response.headers.get("PAYMENT-RESPONSE") || response.headers.get("X-PAYMENT-RESPONSE");
  if (!header) return null;
  try {
    const bytes = getBase64Encoder().encode(header);
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return null;
  }
}

function show(response, body) {
  $("svcpay-result").hidden = false;
  $("svcpay-result-status").textContent = `${response.status} ${response.statusText}`;
  $("svcpay-result-body").textContent = body;
}

async function pay(config, terms, wallet, account) {
  const button = $("svcpay-pay");
  button.disabled = true;
  try {
    status("Building the payment…");
    const unsigned = await buildPayment(config, terms, address(account.address));
    status(`Waiting for ${wallet.name} to sign…`);
    const chain = CHAINS[terms.network] || "solana:localnet";
    const [{ signedTransaction }] = await wallet.features[SIGN].signTransaction({
      account,
      transaction: unsigned,
      chain,
    });
    status("Paying: the facilitator settles the transfer…");
    const [name, value] = paymentHeader(config, terms, new Uint8Array(signedTransaction));
    const response = await retry({ [name]: value });
    if (response.ok) {
      const settled = settlementOf(response);
      const signature = settled && settled.transaction ? ` Transaction ${settled.transaction}.` : "";
      status(`Paid.${signature}`, "ok");
    } else {
      status(`The server answered ${response.status}: the payment was not accepted.`, "error");
      button.disabled = false;
    }
  } catch (e) {
    status(`Not paid: ${e && e.message ? e.message : e}`, "error");
    button.disabled = false;
  }
}

/** Subscribes `account` to `offer.plan` (unless it holds a live subscription to it), then
 * retries the request with X-Svc-Sub. */
async function subscribe(config, offer, wallet, account, button, cap) {
  button.disabled = true;
  try {
    const rpc = createSolanaRpc(config.rpc);
    const subscriber = address(account.address);
    status("Reading the plan…");
    const plan = await readPlan(rpc, offer.plan);
    const encode = getAddressEncoder();
    const text = new TextEncoder();
    const subscription = await pda(plan.program, [text.encode("subscription"), encode.encode(address(offer.plan)), encode.encode(subscriber)]);
    const held = await readAccount(rpc, subscription);
    if (held) {
      status("You hold a subscription to this plan: trying it…");
      const response = await retry({ "X-Svc-Sub": subscription });
      if (response.ok) {
        status(`Served with your subscription ${subscription}.`, "ok");
        return;
      }
    }
    const { tokenProgram } = await readMint(rpc, plan.mint);
    const allowance = await pda(plan.program, [text.encode("allowance"), encode.encode(subscription)]);
    const maxOverage = offer.metered ? baseUnits(cap.value, plan.decimals) : null;
    const withAllowance = maxOverage !== null || (await readAccount(rpc, allowance)) !== null;
    const delegate = await pda(plan.program, [text.encode("delegate"), encode.encode(subscriber)]);
    const source = await ata(subscriber, plan.mint, tokenProgram);
    const data = maxOverage === null ? concat(SUBSCRIBE, [0]) : concat(SUBSCRIBE, [1], u64(maxOverage));
    const instruction = {
      programAddress: plan.program,
      accounts: [
        { address: subscriber, role: AccountRole.WRITABLE_SIGNER },
        { address: address(offer.plan), role: AccountRole.WRITABLE },
        { address: subscription, role: AccountRole.WRITABLE },
        withAllowance
          ? { address: allowance, role: AccountRole.WRITABLE }
          : { address: plan.program, role: AccountRole.READONLY }, // Anchor's "no account"
        { address: source, role: AccountRole.WRITABLE },
        { address: plan.destination, role: AccountRole.WRITABLE },
        { address: plan.mint, role: AccountRole.READONLY },
        { address: delegate, role: AccountRole.READONLY },
        { address: tokenProgram, role: AccountRole.READONLY },
        { address: address(SYSTEM_PROGRAM), role: AccountRole.READONLY },
      ],
      data,
    };
    const { value: lifetime } = await rpc.getLatestBlockhash({ commitment: "confirmed" }).send();
    const message = pipe(
      createTransactionMessage({ version: 0 }),
      (m) => setTransactionMessageFeePayer(subscriber, m),
      (m) => setTransactionMessageLifetimeUsingBlockhash(lifetime, m),
      (m) => appendTransactionMessageInstructions([instruction], m),
    );
    const unsigned = new Uint8Array(getTransactionEncoder().encode(compileTransaction(message)));
    status(`Waiting for ${wallet.name} to sign the subscription…`);
    const [{ signedTransaction }] = await wallet.features[SIGN].signTransaction({
      account,
      transaction: unsigned,
      chain: config.chain || "solana:localnet",
    });
    status("Subscribing: sending the transaction…");
    const wire = getBase64Decoder().decode(new Uint8Array(signedTransaction));
    const signature = await rpc.sendTransaction(wire, { encoding: "base64", preflightCommitment: "confirmed" }).send();
    await confirm(rpc, signature);
    status("Subscribed: asking with the subscription…");
    const response = await retry({ "X-Svc-Sub": subscription });
    if (response.ok) {
      status(`Subscribed. Subscription ${subscription}, transaction ${signature}.`, "ok");
    } else {
      status(`Subscribed (${subscription}), but the server answered ${response.status}.`, "error");
      button.disabled = false;
    }
  } catch (e) {
    status(`Not subscribed: ${e && e.message ? e.message : e}`, "error");
    button.disabled = false;
  }
}

/** The request again with `headers`; its answer shown. */
async function retry(headers) {
  const response = await fetch(window.location.href, {
    headers: { ...headers, Accept: "application/json, text/plain;q=0.9, */*;q=0.1" },
    credentials: "same-origin",
  });
  show(response, await response.text());
  return response;
}

function start() {
  const config = readConfig();
  const section = $("svcpay-wallet");
  if (!config || !section) return;
  const terms = exactTerms(config);
  const plans = config.plans || [];
  if (!terms && plans.length === 0) return;
  section.hidden = false;
  const list = $("svcpay-wallets");
  const { get, on } = getWallets();
  let chosen = null;

  function render() {
    if (chosen) return;
    const wallets = get().filter(usable);
    list.replaceChildren();
    if (wallets.length === 0) {
      status("No Solana wallet found in this browser. Install one (Phantom, Solflare, Backpack), or pay with the svcpay client below.");
      return;
    }
    status(`${wallets.length} wallet${wallets.length > 1 ? "s" : ""} found.`);
    for (const wallet of wallets) {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "wallet";
      if (wallet.icon && wallet.icon.startsWith("data:image/")) {
        const icon = document.createElement("img");
        icon.src = wallet.icon;
        icon.alt = "";
        icon.width = 20;
        icon.height = 20;
        button.append(icon);
      }
      button.append(`Connect ${wallet.name}`);
      button.addEventListener("click", () => connect(wallet));
      item.append(button);
      list.append(item);
    }
  }

  async function connect(wallet) {
    try {
      status(`Connecting ${wallet.name}…`);
      const { accounts } = await wallet.features[CONNECT].connect();
      const account = accounts.find((a) => a.chains.some((c) => c.startsWith("solana:"))) || accounts[0];
      if (!account) throw new Error(`${wallet.name} shared no account`);
      chosen = { wallet, account };
      list.replaceChildren();
      $("svcpay-account").textContent = account.address;
      $("svcpay-connected").hidden = false;
      const first = [];
      const button = $("svcpay-pay");
      if (button && terms) {
        button.addEventListener("click", () => pay(config, terms, wallet, account));
        first.push(button);
      }
      plans.forEach((offer, i) => {
        const sub = $(`svcpay-subscribe-${i}`);
        if (!sub) return;
        const cap = $(`svcpay-cap-${i}`);
        sub.addEventListener("click", () => subscribe(config, offer, wallet, account, sub, cap));
        first.push(sub);
      });
      if (first.length) first[0].focus();
      status(`Connected ${wallet.name}.`);
    } catch (e) {
      status(`Could not connect: ${e && e.message ? e.message : e}`, "error");
    }
  }

  render();
  on("register", render);
  on("unregister", render);
}

start();
