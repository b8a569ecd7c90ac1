// A Wallet Standard wallet for the browser tests, injected before the page's scripts run.
// It registers itself as Phantom, Solflare and Backpack do (the register-wallet event and
// the app-ready handshake of @wallet-standard/wallet), shares one account and signs with a
// local keypair: window.svcpayTestSign, which the test exposes from Python (solders), signs
// the account's slot of the transaction. window.svcpayTestWallet.refuse = true makes it
// refuse to sign, as a person pressing "Reject" would.
(() => {
  const config = window.svcpayTestWalletConfig;
  const chains = ["solana:mainnet", "solana:devnet", "solana:testnet", "solana:localnet"];
  const account = Object.freeze({
    address: config.address,
    publicKey: new Uint8Array(config.publicKey),
    chains,
    features: ["solana:signTransaction"],
    label: "test account",
  });
  const state = { refuse: false, signed: 0, connected: false };
  const wallet = {
    version: "1.0.0",
    name: "svcpay test wallet",
    icon: "data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHZpZXdCb3g9IjAgMCAxIDEiPjxyZWN0IHdpZHRoPSIxIiBoZWlnaHQ9IjEiIGZpbGw9IiM5OTQ1ZmYiLz48L3N2Zz4=",
    chains,
    get accounts() {
      return state.connected ? [account] : [];
    },
    features: {
      "standard:connect": {
        version: "1.0.0",
        connect: async () => {
          state.connected = true;
          return { accounts: [account] };
        },
      },
      "standard:events": { version: "1.0.0", on: () => () => {} },
      "solana:signTransaction": {
        version: "1.0.0",
        supportedTransactionVersions: ["legacy", 0],
        signTransaction: async (...inputs) => {
          if (state.refuse) throw new Error("the user rejected the request");
          const out = [];
          for (const input of inputs) {
            if (input.account.address !== account.address) throw new Error("unknown account");
            const signed = await window.svcpayTestSign(Array.from(input.transaction));
            state.signed += 1;
            out.push({ signedTransaction: new Uint8Array(signed) });
          }
          return out;
        },
      },
    },
  };
  window.svcpayTestWallet = state;
  const callback = ({ register }) => register(wallet);
  try {
    window.dispatchEvent(new CustomEvent("wallet-standard:register-wallet", { detail: callback }));
  } catch (e) {
    console.warn("test wallet: register-wallet event failed", e);
  }
  window.addEventListener("wallet-standard:app-ready", ({ detail: api }) => callback(api));
})();
