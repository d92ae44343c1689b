//! The image core's integration tests, one binary with a module per concern: real files from
//! `testdata/` and `../shared/corpus` through `process`, colour and mezzanine quality against
//! references, near-duplicate accuracy on photographs, and the fuzz finds replayed.

mod animation;
mod auto_quality;
mod colour_quality;
mod common;
mod fuzz_replay;
mod jxl;
mod jxl_out;
mod mezzanine_quality;
mod near_dup_accuracy;
mod near_dup_corpus;
mod process;
mod svg;
mod svg_hostile;
mod watermark;
