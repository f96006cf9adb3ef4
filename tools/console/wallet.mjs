// The test wallet of the console's browser drivers (hire.mjs, wallethire.mjs): Node holds a
// devnet key and answers the EIP-1193 requests of the provider `injectProvider` puts in the page
// (`page.exposeFunction("hiregateTestWallet", wallet.request)` and
// `page.addInitScript(injectProvider)`), signing typed data with viem as a browser wallet would.

import { privateKeyToAccount } from "viem/accounts";

/**
 * A wallet of `privateKey` on `chainId`. Set `reject` to decline signatures (EIP-1193 4001),
 * `corrupt` to sign other typed data than asked (a value one unit higher: a signature that does
 * not match its authorization). `calls` lists the methods asked, `signed` the typed data signed.
 */
export function testWallet(privateKey, chainId) {
  const wallet = {
    account: privateKeyToAccount(privateKey),
    chainId,
    reject: false,
    corrupt: false,
    calls: [],
    signed: [],
    /** What the wallet answers: `{result}` or `{error: {code, message}}` as EIP-1193 defines. */
    async request(method, params) {
      wallet.calls.push(method);
      switch (method) {
        case "eth_requestAccounts":
        case "eth_accounts":
          // Wallets commonly answer in lower case; the page must not depend on the checksum form.
          return { result: [wallet.account.address.toLowerCase()] };
        case "eth_chainId":
          return { result: `0x${wallet.chainId.toString(16)}` };
        case "eth_signTypedData_v4": {
          if (wallet.reject) return { error: { code: 4001, message: "User rejected the request." } };
          const [address, text] = params;
          if (String(address).toLowerCase() !== wallet.account.address.toLowerCase()) {
            return { error: { code: 4100, message: `${address} is not an account of this wallet` } };
          }
          const typed = JSON.parse(text);
          // As MetaMask does: typed data for another chain than the active one is refused.
          if (Number(typed.domain?.chainId) !== wallet.chainId) {
            return {
              error: {
                code: -32602,
                message: `chainId ${typed.domain?.chainId} is not the active chain ${wallet.chainId}`,
              },
            };
          }
          const { EIP712Domain, ...types } = typed.types;
          wallet.signed.push(typed);
          const message = wallet.corrupt
            ? { ...typed.message, value: String(BigInt(typed.message.value) + 1n) }
            : typed.message;
          const signature = await wallet.account.signTypedData({
            domain: typed.domain, types, primaryType: typed.primaryType, message,
          });
          return { result: signature };
        }
        default:
          return { error: { code: 4200, message: `unsupported method ${method}` } };
      }
    },
  };
  return wallet;
}

/** Runs in the page (`addInitScript`): `window.ethereum` backed by `hiregateTestWallet`. */
export function injectProvider() {
  window.ethereum = {
    async request({ method, params }) {
      const answer = await window.hiregateTestWallet(method, params ?? []);
      if (answer.error) throw Object.assign(new Error(answer.error.message), { code: answer.error.code });
      return answer.result;
    },
    on() {},
    removeListener() {},
  };
}
