//! 128-bit integer builtins for the registry-only build (upstream LLVM, `target_arch = "bpf"`).
//!
//! LLVM lowers `i128` multiply/divide (and `u64` overflow-checked multiply) to calls of
//! `__multi3`, `__udivti3`, ... that pass each `i128` in two registers. Rust's own ABI for
//! BPF passes and returns 128-bit values through memory, so the versions in
//! `compiler_builtins` and `solana-compiler-builtins` (Rust ABI) read their arguments from
//! the wrong place: the first such call crashes the program. `extern "unadjusted"` keeps the
//! plain `i128` LLVM signature, so caller and callee agree. Bodies use 64-bit arithmetic only
//! (a 128-bit operation here would call itself). Platform-tools builds (arch "sbf") never
//! compile this file.
#![allow(clippy::many_single_char_names)]

#[inline(always)]
fn split(x: u128) -> (u64, u64) {
    (x as u64, (x >> 64) as u64)
}

#[inline(always)]
fn join(lo: u64, hi: u64) -> u128 {
    (u128::from(hi) << 64) | u128::from(lo)
}

/// Full 64x64 -> 128 product as (lo, hi), from 32-bit halves.
#[inline(always)]
fn mul_wide(a: u64, b: u64) -> (u64, u64) {
    let (a0, a1) = (a & 0xffff_ffff, a >> 32);
    let (b0, b1) = (b & 0xffff_ffff, b >> 32);
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 32) + (p01 & 0xffff_ffff) + (p10 & 0xffff_ffff);
    let lo = (p00 & 0xffff_ffff) | (mid << 32);
    let hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
    (lo, hi)
}

/// Unsigned 128-bit division with remainder, by shift-and-subtract over the quotient's
/// significant bits only (a u64 fast path covers the common case).
fn udivmod(n: u128, d: u128) -> (u128, u128) {
    let (n_lo, n_hi) = split(n);
    let (d_lo, d_hi) = split(d);
    if d_lo == 0 && d_hi == 0 {
        // Rust code checks for zero before dividing; reaching here is a bug: abort.
        std::process::abort();
    }
    if n_hi == 0 && d_hi == 0 {
        return (u128::from(n_lo / d_lo), u128::from(n_lo % d_lo));
    }
    if lt(n_lo, n_hi, d_lo, d_hi) {
        return (0, n);
    }
    let shift = leading_zeros(d_lo, d_hi) - leading_zeros(n_lo, n_hi);
    let (mut r_lo, mut r_hi) = (n_lo, n_hi);
    let (mut s_lo, mut s_hi) = shl(d_lo, d_hi, shift);
    let (mut q_lo, mut q_hi) = (0u64, 0u64);
    let mut i = shift + 1;
    while i > 0 {
        i -= 1;
        (q_lo, q_hi) = shl(q_lo, q_hi, 1);
        if !lt(r_lo, r_hi, s_lo, s_hi) {
            let (lo, borrow) = r_lo.overflowing_sub(s_lo);
            r_hi = r_hi - s_hi - u64::from(borrow);
            r_lo = lo;
            q_lo |= 1;
        }
        (s_lo, s_hi) = (s_lo >> 1 | s_hi << 63, s_hi >> 1);
    }
    (join(q_lo, q_hi), join(r_lo, r_hi))
}

#[inline(always)]
fn lt(a_lo: u64, a_hi: u64, b_lo: u64, b_hi: u64) -> bool {
    a_hi < b_hi || (a_hi == b_hi && a_lo < b_lo)
}

#[inline(always)]
fn leading_zeros(lo: u64, hi: u64) -> u32 {
    if hi == 0 {
        64 + lo.leading_zeros()
    } else {
        hi.leading_zeros()
    }
}

#[inline(always)]
fn shl(lo: u64, hi: u64, s: u32) -> (u64, u64) {
    match s {
        0 => (lo, hi),
        1..=63 => (lo << s, hi << s | lo >> (64 - s)),
        _ => (0, lo << (s - 64)),
    }
}

#[inline(always)]
fn neg(x: u128) -> u128 {
    let (lo, hi) = split(x);
    let (lo, carry) = (!lo).overflowing_add(1);
    join(lo, (!hi).wrapping_add(u64::from(carry)))
}

#[inline(always)]
fn abs_sign(x: i128) -> (u128, bool) {
    let negative = (x >> 127) != 0;
    (if negative { neg(x as u128) } else { x as u128 }, negative)
}

#[no_mangle]
pub extern "unadjusted" fn __multi3(a: i128, b: i128) -> i128 {
    let (a_lo, a_hi) = split(a as u128);
    let (b_lo, b_hi) = split(b as u128);
    let (lo, hi) = mul_wide(a_lo, b_lo);
    let hi = hi
        .wrapping_add(a_lo.wrapping_mul(b_hi))
        .wrapping_add(a_hi.wrapping_mul(b_lo));
    join(lo, hi) as i128
}

#[no_mangle]
pub extern "unadjusted" fn __udivti3(n: u128, d: u128) -> u128 {
    udivmod(n, d).0
}

#[no_mangle]
pub extern "unadjusted" fn __umodti3(n: u128, d: u128) -> u128 {
    udivmod(n, d).1
}

#[no_mangle]
pub extern "unadjusted" fn __divti3(n: i128, d: i128) -> i128 {
    let (n_abs, n_neg) = abs_sign(n);
    let (d_abs, d_neg) = abs_sign(d);
    let q = udivmod(n_abs, d_abs).0;
    (if n_neg != d_neg { neg(q) } else { q }) as i128
}

#[no_mangle]
pub extern "unadjusted" fn __modti3(n: i128, d: i128) -> i128 {
    let (n_abs, n_neg) = abs_sign(n);
    let (d_abs, _) = abs_sign(d);
    let r = udivmod(n_abs, d_abs).1;
    (if n_neg { neg(r) } else { r }) as i128
}
