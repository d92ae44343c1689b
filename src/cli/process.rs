//! `imgcas process <input> --spec '<options>' -o <output>`: the server's processing path on a
//! file. Exit 0 with the output written; on a processing error, exit 1 and one line on stderr,
//! `<code>: <message>` with docs/api.md's error code.

use std::path::Path;

use imgcas_processors::{self as processors, Limits, SourceFormat, Spec};

use imgcas::error::Error;

/// What a successful run produced.
#[derive(Debug)]
pub struct Outcome {
    pub width: u32,
    pub height: u32,
    pub format: &'static str,
    pub bytes: usize,
    /// For `q=auto`: the quality chosen and its score.
    pub chosen: Option<processors::Chosen>,
}

/// Reads `input`, applies `spec` (a query string such as `w=400&format=webp`), writes `output`
/// (`-` for stdout). `accept` stands in for the Accept header when `format=auto`.
pub fn run(
    input: &Path,
    spec: &str,
    output: &Path,
    accept: Option<processors::Accept<'_>>,
    limits: &Limits,
    targets: &processors::AutoTargets,
) -> Result<Outcome, Error> {
    let spec = Spec::parse(spec)?;
    let bytes = std::fs::read(input)
        .map_err(|e| Error::NotFound(format!("cannot read {}: {e}", input.display())))?;
    let info = processors::probe(&bytes, limits)?;
    // As the service resolves it: an animated source stays animated in GIF and WebP.
    let frames = processors::animation::frame_count(&bytes);
    let resolved = spec
        .resolve_frames(
            SourceFormat::as_output(info.format),
            info.has_alpha,
            frames,
            accept,
        )
        .with_targets(targets);
    let processed = processors::process(&bytes, &resolved, limits)?;
    let written = if output == Path::new("-") {
        use std::io::Write;
        std::io::stdout().write_all(&processed.bytes)
    } else {
        std::fs::write(output, &processed.bytes)
    };
    written.map_err(|e| Error::Internal(format!("cannot write {}: {e}", output.display())))?;
    Ok(Outcome {
        width: processed.width,
        height: processed.height,
        format: processed.format.name(),
        bytes: processed.bytes.len(),
        chosen: processed.chosen,
    })
}

/// The stderr line for a failed run.
pub fn describe_error(error: &Error) -> String {
    format!("{}: {error}", error.code())
}
