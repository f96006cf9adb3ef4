//! The devnet's Permit2 and x402 proxy look-alikes behave as their published interfaces say:
//! each rule is exercised by an `eth_call` (or a transaction) of a real signed permit, and the
//! revert is decoded to its stable reason as the facilitator decodes it.

#![cfg(feature = "devnet")]

use std::time::{SystemTime, UNIX_EPOCH};

use alloy::primitives::{Address, U256};
use alloy::providers::{Provider, ProviderBuilder};
use alloy::rpc::types::{TransactionInput, TransactionRequest};
use alloy::signers::local::PrivateKeySigner;
use hiregate_payments::devnet::bindings::Permit2;
use hiregate_payments::devnet::{Devnet, PERMIT2_ADDRESS};
use hiregate_payments::permit2::Permit2Payment;
use hiregate_payments::permit2::ledger::{Permit2OnChain, Permit2Ref, permit_on_chain};
use hiregate_payments::permit2::onchain::{nonce_position, revert_reason, settlement_call};
use hiregate_payments::{Network, PaymentRequirements, Reason};
use hiregate_payments::{Permit2SignOptions, sign_permit2_payment};

const AMOUNT: u64 = 1_000_000;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The settlement call of `payment` for `amount` as `from` would send it: `Ok` when it would go
/// through, else the stable reason of its revert.
async fn simulate(
    devnet: &Devnet,
    from: Address,
    payment: &Permit2Payment,
    amount: u64,
) -> Result<(), Reason> {
    let (proxy, calldata) = settlement_call(payment, U256::from(amount));
    let request = TransactionRequest::default()
        .from(from)
        .to(proxy)
        .input(TransactionInput::new(calldata.into()));
    match devnet.provider().call(request).await {
        Ok(_) => Ok(()),
        Err(error) => {
            let payload = error.as_error_resp().expect("a revert, not a node failure");
            Err(revert_reason(
                payload.as_revert_data().as_ref().map(|data| data.as_ref()),
                &payload.message,
            ))
        }
    }
}

struct Setup {
    devnet: Devnet,
    payer: PrivateKeySigner,
    pay_to: Address,
    exact: PaymentRequirements,
    upto: PaymentRequirements,
}

impl Setup {
    async fn start() -> Self {
        let devnet = Devnet::start().await.unwrap();
        let payer = devnet.fresh_relayer().await.unwrap();
        devnet
            .mint_permit_token(payer.address(), U256::from(10 * AMOUNT))
            .await
            .unwrap();
        devnet
            .approve_permit2(&payer, devnet.permit_token(), U256::MAX)
            .await
            .unwrap();
        let network: Network = devnet.network().parse().unwrap();
        let pay_to = PrivateKeySigner::random().address();
        let exact = PaymentRequirements::exact_permit2_evm(
            network,
            U256::from(AMOUNT),
            devnet.permit_token(),
            pay_to,
            300,
            None,
        );
        let upto = PaymentRequirements::upto_evm(
            network,
            U256::from(AMOUNT),
            devnet.permit_token(),
            pay_to,
            300,
            None,
            devnet.relayer().address(),
        );
        Self {
            devnet,
            payer,
            pay_to,
            exact,
            upto,
        }
    }

    async fn payment(
        &self,
        offer: &PaymentRequirements,
        now: u64,
        options: &Permit2SignOptions,
    ) -> Permit2Payment {
        let payload = sign_permit2_payment(&self.payer, offer, None, now, options)
            .await
            .unwrap();
        Permit2Payment::parse(&payload, offer).unwrap()
    }
}

#[tokio::test]
async fn permit2_and_the_proxies_enforce_what_the_payer_signed() {
    let setup = Setup::start().await;
    let anyone = PrivateKeySigner::random().address();
    let relayer = setup.devnet.relayer().address();
    let now = unix_now();

    // `exact`: anyone may submit, for exactly the signed amount.
    let exact = setup
        .payment(&setup.exact, now, &Permit2SignOptions::default())
        .await;
    assert_eq!(
        simulate(&setup.devnet, anyone, &exact, AMOUNT).await,
        Ok(())
    );

    // Not before the witness's validAfter.
    let early = setup
        .payment(
            &setup.exact,
            now,
            &Permit2SignOptions {
                valid_after: Some(now + 3_600),
                ..Permit2SignOptions::default()
            },
        )
        .await;
    assert_eq!(
        simulate(&setup.devnet, anyone, &early, AMOUNT).await,
        Err(Reason::ValidAfter)
    );
    // Not after the deadline (signed an hour ago with a 300 s timeout).
    let expired = setup
        .payment(&setup.exact, now - 3_600, &Permit2SignOptions::default())
        .await;
    assert_eq!(
        simulate(&setup.devnet, anyone, &expired, AMOUNT).await,
        Err(Reason::ValidBefore)
    );
    // A signature by someone else, or over other terms, is refused by Permit2.
    let mut forged = exact.clone();
    forged.payload.permit2_authorization.witness.to = anyone;
    assert_eq!(
        simulate(&setup.devnet, anyone, &forged, AMOUNT).await,
        Err(Reason::Signature)
    );

    // `upto`: only the witness's facilitator, and at most the maximum.
    let upto = setup
        .payment(&setup.upto, now, &Permit2SignOptions::default())
        .await;
    assert_eq!(
        simulate(&setup.devnet, anyone, &upto, AMOUNT / 2).await,
        Err(Reason::UptoFacilitatorMismatch)
    );
    assert_eq!(
        simulate(&setup.devnet, relayer, &upto, AMOUNT + 1).await,
        Err(Reason::UptoSettlementExceedsAmount)
    );
    assert_eq!(
        simulate(&setup.devnet, relayer, &upto, 0).await,
        Err(Reason::ValueMismatch)
    );
    assert_eq!(
        simulate(&setup.devnet, relayer, &upto, AMOUNT / 2).await,
        Ok(())
    );
}

#[tokio::test]
async fn a_nonce_moves_money_once_and_the_payer_can_burn_it() {
    let setup = Setup::start().await;
    let relayer = ProviderBuilder::new()
        .wallet(setup.devnet.relayer())
        .connect_http(setup.devnet.rpc_url().clone());
    let now = unix_now();
    let payment = setup
        .payment(&setup.exact, now, &Permit2SignOptions::default())
        .await;
    let (proxy, calldata) = settlement_call(&payment, U256::from(AMOUNT));
    let receipt = relayer
        .send_transaction(
            TransactionRequest::default()
                .to(proxy)
                .input(TransactionInput::new(calldata.into())),
        )
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status());
    let nonce = payment.payload.permit2_authorization.nonce.get();
    assert!(
        setup
            .devnet
            .permit2_nonce_used(setup.payer.address(), nonce)
            .await
            .unwrap()
    );
    assert_eq!(
        simulate(
            &setup.devnet,
            setup.devnet.relayer().address(),
            &payment,
            AMOUNT
        )
        .await,
        Err(Reason::NonceAlreadyUsed)
    );

    // The payer burns the nonce of a permit it signed but wants dead.
    let doomed = setup
        .payment(
            &setup.exact,
            now,
            &Permit2SignOptions {
                nonce: Some(U256::from(1_234_567u64)),
                ..Permit2SignOptions::default()
            },
        )
        .await;
    let (word, bit) = nonce_position(U256::from(1_234_567u64));
    let holder = ProviderBuilder::new()
        .wallet(setup.payer.clone())
        .connect_http(setup.devnet.rpc_url().clone());
    Permit2::new(PERMIT2_ADDRESS, &holder)
        .invalidateUnorderedNonces(word, bit)
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert_eq!(
        simulate(&setup.devnet, Address::ZERO, &doomed, AMOUNT).await,
        Err(Reason::NonceAlreadyUsed)
    );
    let permit = |nonce: U256| Permit2Ref {
        token: setup.devnet.permit_token(),
        owner: setup.payer.address(),
        to: setup.pay_to,
        nonce,
    };
    assert_eq!(
        permit_on_chain(
            &setup.devnet.provider(),
            permit(U256::from(1_234_567u64)),
            None
        )
        .await
        .unwrap(),
        Permit2OnChain::Invalidated
    );
    match permit_on_chain(&setup.devnet.provider(), permit(nonce), None)
        .await
        .unwrap()
    {
        Permit2OnChain::Settled(transfer) => {
            assert_eq!(transfer.transaction, receipt.transaction_hash);
            assert_eq!(transfer.amount, U256::from(AMOUNT));
        }
        other => panic!("{other:?}"),
    }
}
