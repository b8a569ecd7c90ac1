"""Transfer-fee arithmetic: a mint's fee schedules (`TransferFee`, `TransferFeeConfig`),
what a one-time payment in a mint reckons with at an epoch (`MintAtEpoch`, docs/adr/0031),
and what a payment that nets less than its price is short of (`shortfall`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from solders.pubkey import Pubkey

from svcpay.protocol.token2022.layout import (
    ET,
    MAX_FEE_BASIS_POINTS,
    U64_MAX,
    _check_u64,
    _maybe_pubkey,
    _sized,
    _u16,
    _u64,
)


# -- transfer-fee schedules -------------------------------------------------------------
@dataclass(frozen=True)
class TransferFee:
    """One transfer-fee schedule: from `epoch` on, `basis_points` of a transfer (rounded
    up), at most `maximum_fee`, is withheld from what the recipient gets."""

    epoch: int
    maximum_fee: int
    basis_points: int
    SIZE: ClassVar[int] = 18

    @classmethod
    def from_bytes(cls, raw: bytes) -> TransferFee:
        if len(raw) != cls.SIZE:
            raise ValueError(f"a TransferFee is {cls.SIZE} bytes, got {len(raw)}")
        return cls(_u64(raw, 0), _u64(raw, 8), _u16(raw, 16))

    def fee(self, amount: int) -> int:
        """The fee Token-2022 withholds from a transfer of `amount`: ceil(amount * bps /
        10_000), capped at maximum_fee (TransferFee::calculate_fee)."""
        _check_u64(amount, "amount")
        if self.basis_points == 0 or amount == 0:
            return 0
        raw = -(-amount * self.basis_points // MAX_FEE_BASIS_POINTS)
        return min(raw, self.maximum_fee)

    def gross_for_net(self, net: int) -> int:
        """The smallest transfer amount whose recipient receives exactly `net` (what a payer
        sends so the payee gets the price): TransferFee::calculate_pre_fee_amount. Raises
        ValueError when no u64 amount does."""
        _check_u64(net, "net amount")
        bps, cap = self.basis_points, self.maximum_fee
        if bps == 0 or net == 0:
            return net
        if bps == MAX_FEE_BASIS_POINTS:
            gross = net + cap
        else:
            raw = -(-net * MAX_FEE_BASIS_POINTS // (MAX_FEE_BASIS_POINTS - bps))
            gross = net + cap if raw - net >= cap else raw
        if gross > U64_MAX:
            raise ValueError(f"no u64 transfer nets {net} at {bps} bps")
        return gross


@dataclass(frozen=True)
class TransferFeeConfig:
    """A mint's TransferFeeConfig: its authorities, the fees withheld and moved to the
    mint, and two schedules (the newer applies from its epoch on)."""

    config_authority: Pubkey | None
    withdraw_withheld_authority: Pubkey | None
    withheld_amount: int
    older: TransferFee
    newer: TransferFee

    @classmethod
    def from_bytes(cls, raw: bytes) -> TransferFeeConfig:
        raw = _sized(raw, ET.TRANSFER_FEE_CONFIG)
        return cls(
            _maybe_pubkey(raw, 0),
            _maybe_pubkey(raw, 32),
            _u64(raw, 64),
            TransferFee.from_bytes(raw[72:90]),
            TransferFee.from_bytes(raw[90:108]),
        )

    def schedule(self, epoch: int) -> TransferFee:
        """The schedule in force at `epoch` (TransferFeeConfig::get_epoch_fee)."""
        return self.newer if epoch >= self.newer.epoch else self.older

    def fee_for(self, amount: int, epoch: int) -> int:
        """The fee withheld from a transfer of `amount` during `epoch`."""
        return self.schedule(epoch).fee(amount)

    def gross_for_net(self, net: int, epoch: int) -> int:
        """What to transfer during `epoch` so that the recipient receives `net`."""
        return self.schedule(epoch).gross_for_net(net)


# -- one-time payments in a mint (docs/adr/0031) ------------------------------------------
@dataclass(frozen=True)
class MintAtEpoch:
    """What a one-time payment in a mint reckons with now: the token program that moves it,
    the transfer-fee schedule in force this epoch (None: the mint has no TransferFeeConfig)
    and its transfer-hook program (None: none). `MintInfo.at(epoch)` makes one; the
    payment checks take it as given (pure), the facilitator and the gate read it over RPC
    (`svcpay.protocol.mints`) for Token-2022 mints only."""

    program: Pubkey
    fee: TransferFee | None = None
    hook_program: Pubkey | None = None

    @property
    def has_fee(self) -> bool:
        """The mint has a TransferFeeConfig: a payment is judged by what it nets."""
        return self.fee is not None

    def fee_for(self, amount: int) -> int:
        """What Token-2022 withholds from a transfer of `amount` now (in the destination)."""
        return 0 if self.fee is None else self.fee.fee(amount)

    def received(self, amount: int) -> int:
        """What the recipient of a transfer of `amount` receives now."""
        return amount - self.fee_for(amount)

    def gross_for_net(self, net: int) -> int:
        """The smallest transfer whose recipient receives `net` now (what a payer sends so
        the payee gets the price)."""
        return net if self.fee is None else self.fee.gross_for_net(net)


def shortfall(mint: MintAtEpoch, paid: int, price: int) -> str | None:
    """None when a transfer of `paid` leaves its recipient at least `price` now; else what
    happens to it, for a refusal: "of which the fee withholds F: N arrives, short of P (send
    G)"."""
    fee = mint.fee_for(paid)
    if paid - fee >= price:
        return None
    try:
        send = str(mint.gross_for_net(price))
    except ValueError:
        send = "more than a u64 can hold"
    return (
        f"of which the mint's transfer fee withholds {fee}: {paid - fee} arrives, short of "
        f"{price} (send {send})"
    )
