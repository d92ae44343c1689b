//! Says so loudly when the JPEG codec is about to be built without its SIMD code: libjpeg-turbo
//! (the `mozjpeg` crate) needs `nasm` for it and, without it, silently builds code about twice
//! as slow. `./imgcas.sh` installs nasm before building; a bare `cargo build` gets this warning.

fn main() {
    println!("cargo:rerun-if-env-changed=PATH");
    let nasm = std::process::Command::new("nasm").arg("-v").output();
    if !nasm.is_ok_and(|out| out.status.success()) {
        println!(
            "cargo:warning=nasm not found: libjpeg-turbo builds WITHOUT SIMD and JPEG is ~2x \
             slower. Install nasm (apt-get install nasm), then `cargo clean -p mozjpeg-sys`."
        );
    }
}
