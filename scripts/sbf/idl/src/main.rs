//! `svc-idl PROGRAM_DIR IDL_OUT LEGACY_OUT`: build the Anchor IDL of the program in
//! PROGRAM_DIR, write it to IDL_OUT, and its legacy form (anchorpy's input) to LEGACY_OUT.
use std::{env, fs, path::PathBuf, process::ExitCode};

use anchor_lang_idl::{build::IdlBuilder, convert::convert_idl_to_legacy};

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let [program, idl_out, legacy_out] = args.as_slice() else {
        eprintln!("usage: svc-idl PROGRAM_DIR IDL_OUT LEGACY_OUT");
        return ExitCode::from(2);
    };
    match run(program.into(), idl_out.into(), legacy_out.into()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("svc-idl: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(program: PathBuf, idl_out: PathBuf, legacy_out: PathBuf) -> anyhow::Result<()> {
    let idl = IdlBuilder::new().program_path(program).build()?;
    for out in [&idl_out, &legacy_out] {
        if let Some(dir) = out.parent() {
            fs::create_dir_all(dir)?;
        }
    }
    let mut json = serde_json::to_vec_pretty(&idl)?;
    json.push(b'\n');
    fs::write(&idl_out, json)?;
    let mut legacy = convert_idl_to_legacy(&idl)?;
    legacy.push(b'\n');
    fs::write(&legacy_out, legacy)?;
    Ok(())
}
