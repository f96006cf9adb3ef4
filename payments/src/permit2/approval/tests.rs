//! The chain-free checks of a signed approval, on transactions signed here the way the official
//! client signs them (EIP-1559, `approve(Permit2, maxUint256)`, gas limit 70 000).

use alloy::consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy::eips::eip2718::Encodable2718;
use alloy::primitives::{TxKind, address};
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;

use super::*;

const CHAIN_ID: u64 = 31_337;
const TOKEN: Address = address!("5FbDB2315678afecb367f032d93F642f64180aa3");

fn approval_tx(to: Address, spender: Address, chain_id: u64) -> TxEip1559 {
    TxEip1559 {
        chain_id,
        nonce: 0,
        gas_limit: 70_000,
        max_fee_per_gas: 2_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to: TxKind::Call(to),
        value: U256::ZERO,
        access_list: Default::default(),
        input: IApprove::approveCall {
            spender,
            amount: U256::MAX,
        }
        .abi_encode()
        .into(),
    }
}

fn signed(signer: &PrivateKeySigner, tx: TxEip1559) -> Bytes {
    let signature = signer.sign_hash_sync(&tx.signature_hash()).unwrap();
    TxEnvelope::from(tx.into_signed(signature))
        .encoded_2718()
        .into()
}

fn extension(payer: Address, signed_transaction: Bytes) -> Erc20ApprovalGasSponsoring {
    Erc20ApprovalGasSponsoring {
        from: payer,
        asset: TOKEN,
        spender: PERMIT2_ADDRESS,
        amount: U256::MAX,
        signed_transaction,
    }
}

#[test]
fn the_official_shape_passes_and_names_what_is_broadcast() {
    let payer = PrivateKeySigner::random();
    let raw = signed(&payer, approval_tx(TOKEN, PERMIT2_ADDRESS, CHAIN_ID));
    let mut extensions = Extensions::new();
    extensions.insert(
        ERC20_APPROVAL_GAS_SPONSORING.into(),
        json!({"info": {
            "from": payer.address().to_checksum(None),
            "asset": TOKEN.to_checksum(None),
            "spender": PERMIT2_ADDRESS.to_checksum(None),
            "amount": U256::MAX.to_string(),
            "signedTransaction": raw.to_string(),
            "version": "1",
        }}),
    );
    let parsed = Erc20ApprovalGasSponsoring::from_extensions(&extensions)
        .unwrap()
        .unwrap();
    let approval = parsed
        .check(payer.address(), TOKEN, CHAIN_ID, U256::from(1000u64))
        .unwrap();
    assert_eq!(approval.signer, payer.address());
    assert_eq!(approval.nonce, 0);
    assert_eq!(approval.gas_cost(), U256::from(70_000u64 * 2_000_000_000));
    assert_eq!(approval.raw, raw);
}

#[test]
fn the_servers_declaration_echoed_back_is_no_approval() {
    let mut extensions = Extensions::new();
    extensions.insert(
        ERC20_APPROVAL_GAS_SPONSORING.into(),
        erc20_approval_gas_sponsoring_offer(),
    );
    assert_eq!(
        Erc20ApprovalGasSponsoring::from_extensions(&extensions),
        Ok(None)
    );
}

#[test]
fn forged_approvals_are_refused_with_the_official_codes() {
    let payer = PrivateKeySigner::random();
    let other = PrivateKeySigner::random();
    let elsewhere = address!("00000000000000000000000000000000000000e1");
    let check = |extension: Erc20ApprovalGasSponsoring| {
        extension
            .check(payer.address(), TOKEN, CHAIN_ID, U256::from(1000u64))
            .map(|_| ())
    };
    let good = || signed(&payer, approval_tx(TOKEN, PERMIT2_ADDRESS, CHAIN_ID));
    let cases = [
        (
            extension(
                payer.address(),
                signed(&payer, approval_tx(TOKEN, elsewhere, CHAIN_ID)),
            ),
            Reason::Erc20ApprovalTxWrongSpender,
        ),
        (
            extension(
                payer.address(),
                signed(&other, approval_tx(TOKEN, PERMIT2_ADDRESS, CHAIN_ID)),
            ),
            Reason::Erc20ApprovalTxSignerMismatch,
        ),
        (
            extension(
                payer.address(),
                signed(&payer, approval_tx(elsewhere, PERMIT2_ADDRESS, CHAIN_ID)),
            ),
            Reason::Erc20ApprovalTxWrongTarget,
        ),
        (
            extension(
                payer.address(),
                signed(&payer, approval_tx(TOKEN, PERMIT2_ADDRESS, 1)),
            ),
            Reason::Erc20ApprovalTxUnsupported,
        ),
        (
            extension(payer.address(), Bytes::from_static(&[0x02, 0xc0])),
            Reason::Erc20ApprovalTxParseFailed,
        ),
        (
            extension(other.address(), good()),
            Reason::Erc20ApprovalFromMismatch,
        ),
        (
            Erc20ApprovalGasSponsoring {
                spender: elsewhere,
                ..extension(payer.address(), good())
            },
            Reason::Erc20ApprovalSpenderNotPermit2,
        ),
        (
            Erc20ApprovalGasSponsoring {
                amount: U256::from(5u8),
                ..extension(payer.address(), good())
            },
            Reason::Erc20ApprovalTxInvalidCalldata,
        ),
    ];
    for (extension, reason) in cases {
        assert_eq!(check(extension), Err(reason.clone()), "{reason}");
    }
    let mut wrong_selector = approval_tx(TOKEN, PERMIT2_ADDRESS, CHAIN_ID);
    wrong_selector.input = Bytes::from_static(&[0xa9, 0x05, 0x9c, 0xbb]);
    assert_eq!(
        check(extension(payer.address(), signed(&payer, wrong_selector))),
        Err(Reason::Erc20ApprovalTxWrongSelector)
    );
}
