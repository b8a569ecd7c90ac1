//! Session vouchers: the 50-byte message a session's key signs, and finding that signature
//! in the transaction's Ed25519 precompile instruction (docs/adr/0024).
//!
//! The message is MPP's Solana session voucher: `0x56 0x01 | channel (32) | cumulative u64
//! LE | expiry i64 LE`, where the channel is the session's address. The precompile has
//! already verified every signature its instruction lists when this program runs; what is
//! left to check is that one of them is by the session's key over exactly this message,
//! with every offset pointing into the precompile instruction's own data. An offset into
//! another instruction would let a signature over bytes elsewhere in the transaction (a
//! memo, another program's data) stand in for a voucher: that is refused.
use anchor_lang::prelude::*;

use crate::errors::BillingError;

pub const VOUCHER_LEN: usize = 50;
const VOUCHER_TAG: [u8; 2] = [0x56, 0x01];
/// The Ed25519 signature verification precompile.
pub const ED25519_PROGRAM_ID: Pubkey = pubkey!("Ed25519SigVerify111111111111111111111111111");
/// An instruction index in the precompile's offsets meaning "this instruction".
const THIS_INSTRUCTION: u16 = u16::MAX;
const HEADER: usize = 2; // num_signatures u8, padding u8
const OFFSETS_LEN: usize = 14; // seven u16
const PUBKEY_LEN: usize = 32;
const SIGNATURE_LEN: usize = 64;

/// The signed message of a voucher for `channel` (the session's address).
pub fn message(channel: &Pubkey, cumulative: u64, expiry: i64) -> [u8; VOUCHER_LEN] {
    let mut m = [0u8; VOUCHER_LEN];
    m[..2].copy_from_slice(&VOUCHER_TAG);
    m[2..34].copy_from_slice(channel.as_ref());
    m[34..42].copy_from_slice(&cumulative.to_le_bytes());
    m[42..50].copy_from_slice(&expiry.to_le_bytes());
    m
}

/// Requires that instruction `index` of the transaction is the Ed25519 precompile and
/// verifies a signature by `signer` over `expected`, all of it within its own data. Reads
/// the instructions sysvar in place (no copy of the instruction).
pub fn require_signed(
    instructions: &AccountInfo,
    index: u16,
    signer: &Pubkey,
    expected: &[u8; VOUCHER_LEN],
) -> Result<()> {
    let sysvar = instructions.try_borrow_data()?;
    let data = precompile_data(&sysvar, index).ok_or(BillingError::VoucherNotSigned)?;
    require!(
        signs(data, index, signer, expected),
        BillingError::VoucherNotSigned
    );
    Ok(())
}

/// The data of instruction `index` in the instructions sysvar's serialization, if that
/// instruction is the Ed25519 precompile. Layout: `u16 count | u16 offset * count`, then
/// per instruction `u16 accounts | (u8 flags, 32 key) * accounts | 32 program | u16 len |
/// data`.
pub fn precompile_data(sysvar: &[u8], index: u16) -> Option<&[u8]> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(sysvar.get(at..at + 2)?.try_into().ok()?));
    if index >= u16_at(0)? {
        return None;
    }
    let start = usize::from(u16_at(2 + 2 * usize::from(index))?);
    let program_at = start + 2 + 33 * usize::from(u16_at(start)?);
    if sysvar.get(program_at..program_at + 32)? != ED25519_PROGRAM_ID.as_ref() {
        return None;
    }
    let len = usize::from(u16_at(program_at + 32)?);
    sysvar.get(program_at + 34..program_at + 34 + len)
}

/// Whether the precompile instruction `data` (at transaction index `index`) lists a
/// signature by `signer` over `expected` whose bytes all lie in `data` itself.
pub fn signs(data: &[u8], index: u16, signer: &Pubkey, expected: &[u8]) -> bool {
    let Some(&count) = data.first() else {
        return false;
    };
    (0..usize::from(count)).any(|i| {
        let at = HEADER + i * OFFSETS_LEN;
        let Some(o) = data.get(at..at + OFFSETS_LEN) else {
            return false;
        };
        let field = |k: usize| u16::from_le_bytes([o[2 * k], o[2 * k + 1]]);
        let own = |ix: u16| ix == THIS_INSTRUCTION || ix == index;
        let (sig_at, sig_ix, key_at, key_ix) = (field(0), field(1), field(2), field(3));
        let (msg_at, msg_len, msg_ix) = (field(4), field(5), field(6));
        own(sig_ix)
            && own(key_ix)
            && own(msg_ix)
            && usize::from(msg_len) == expected.len()
            && slice(data, sig_at, SIGNATURE_LEN).is_some()
            && slice(data, key_at, PUBKEY_LEN) == Some(signer.as_ref())
            && slice(data, msg_at, expected.len()) == Some(expected)
    })
}

fn slice(data: &[u8], at: u16, len: usize) -> Option<&[u8]> {
    let start = usize::from(at);
    data.get(start..start.checked_add(len)?)
}

/// The y-coordinates (little-endian, sign bit clear) of Ed25519's eight small-order points,
/// with the two non-canonical encodings (p and p + 1) of 0 and 1: libsodium's blocklist.
/// A voucher key among them has signatures that anyone can forge or that verify for many
/// messages; `open_session` refuses it.
const SMALL_ORDER: [[u8; 32]; 7] = {
    let mut list = [[0u8; 32]; 7];
    list[1][0] = 1;
    list[2] = [
        0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98,
        0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53,
        0xfc, 0x05,
    ];
    list[3] = [
        0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67,
        0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac,
        0x03, 0x7a,
    ];
    // p - 1, p, p + 1: 0xec, 0xed, 0xee, then 0xff... and 0x7f.
    let mut i = 4;
    while i < 7 {
        let mut j = 1;
        while j < 31 {
            list[i][j] = 0xff;
            j += 1;
        }
        list[i][0] = 0xec + (i as u8 - 4);
        list[i][31] = 0x7f;
        i += 1;
    }
    list
};

/// Whether `key` encodes one of Ed25519's small-order points (the all-zero key among them),
/// whatever its sign bit.
pub fn small_order(key: &Pubkey) -> bool {
    let mut y = key.to_bytes();
    y[31] &= 0x7f;
    SMALL_ORDER.contains(&y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use anchor_lang::compat::solana_instructions_sysvar::construct_instructions_data;
    use anchor_lang::solana_program::instruction::{BorrowedAccountMeta, BorrowedInstruction};

    #[test]
    fn the_precompile_is_found_in_the_sysvar_by_index() {
        let (ed, other) = (ED25519_PROGRAM_ID, Pubkey::new_unique());
        let key = Pubkey::new_unique();
        let meta = BorrowedAccountMeta {
            pubkey: &key,
            is_signer: true,
            is_writable: false,
        };
        let ixs = [
            BorrowedInstruction {
                program_id: &other,
                accounts: vec![meta],
                data: &[1, 2, 3],
            },
            BorrowedInstruction {
                program_id: &ed,
                accounts: vec![],
                data: &[9, 8],
            },
        ];
        let sysvar = construct_instructions_data(&ixs);
        assert_eq!(precompile_data(&sysvar, 1), Some(&[9u8, 8][..]));
        assert_eq!(precompile_data(&sysvar, 0), None); // not the precompile
        assert_eq!(precompile_data(&sysvar, 2), None); // past the end
        assert_eq!(precompile_data(&sysvar[..10], 1), None); // truncated
    }

    /// Precompile data with one signature entry whose parts sit at the given places.
    fn one_entry(key: &Pubkey, msg: &[u8], ixs: (u16, u16, u16)) -> Vec<u8> {
        let key_at = (HEADER + OFFSETS_LEN) as u16;
        let sig_at = key_at + PUBKEY_LEN as u16;
        let msg_at = sig_at + SIGNATURE_LEN as u16;
        let mut d = vec![1u8, 0];
        for v in [
            sig_at,
            ixs.0,
            key_at,
            ixs.1,
            msg_at,
            msg.len() as u16,
            ixs.2,
        ] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(key.as_ref());
        d.extend_from_slice(&[7u8; SIGNATURE_LEN]);
        d.extend_from_slice(msg);
        d
    }

    #[test]
    fn the_message_is_mpps_fifty_bytes() {
        let channel = Pubkey::new_from_array([9; 32]);
        let m = message(&channel, 1_000, -1);
        assert_eq!(&m[..2], &[0x56, 0x01]);
        assert_eq!(&m[2..34], channel.as_ref());
        assert_eq!(u64::from_le_bytes(m[34..42].try_into().unwrap()), 1_000);
        assert_eq!(i64::from_le_bytes(m[42..50].try_into().unwrap()), -1);
    }

    #[test]
    fn a_signature_within_its_own_instruction_counts() {
        let key = Pubkey::new_unique();
        let msg = message(&Pubkey::new_unique(), 5, 0);
        let m = THIS_INSTRUCTION;
        assert!(signs(&one_entry(&key, &msg, (m, m, m)), 0, &key, &msg));
        assert!(signs(&one_entry(&key, &msg, (3, 3, 3)), 3, &key, &msg));
    }

    #[test]
    fn offsets_into_another_instruction_are_refused() {
        let key = Pubkey::new_unique();
        let msg = message(&Pubkey::new_unique(), 5, 0);
        let m = THIS_INSTRUCTION;
        for ixs in [(1, m, m), (m, 1, m), (m, m, 1)] {
            assert!(!signs(&one_entry(&key, &msg, ixs), 0, &key, &msg));
        }
    }

    #[test]
    fn another_key_message_or_length_is_refused() {
        let key = Pubkey::new_unique();
        let msg = message(&Pubkey::new_unique(), 5, 0);
        let m = THIS_INSTRUCTION;
        let data = one_entry(&key, &msg, (m, m, m));
        assert!(!signs(&data, 0, &Pubkey::new_unique(), &msg));
        let other = message(&Pubkey::new_unique(), 6, 0);
        assert!(!signs(&data, 0, &key, &other));
        assert!(!signs(
            &one_entry(&key, &msg[..49], (m, m, m)),
            0,
            &key,
            &msg
        ));
        assert!(!signs(&data[..data.len() - 1], 0, &key, &msg)); // truncated
        assert!(!signs(&[], 0, &key, &msg));
        let mut lying = data.clone();
        lying[0] = 9; // more entries than the data holds
        assert!(signs(&lying, 0, &key, &msg)); // the first, real one still matches
        lying[HEADER..HEADER + 2].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(!signs(&lying, 0, &key, &msg)); // an offset past the end
    }

    #[test]
    fn small_order_keys_are_known_whatever_their_sign_bit() {
        let mut zero = [0u8; 32];
        assert!(small_order(&Pubkey::new_from_array(zero)));
        zero[31] = 0x80;
        assert!(small_order(&Pubkey::new_from_array(zero)));
        let mut p = [0xffu8; 32];
        p[0] = 0xed;
        p[31] = 0x7f;
        assert!(small_order(&Pubkey::new_from_array(p)));
        assert!(!small_order(&Pubkey::new_from_array([7; 32])));
        assert!(!small_order(&crate::ID));
    }
}
