//! A fit — a variant's output laid out on an input of a given upright size — and the fits a
//! plan has computed ([`Fits`], each at most once). The plan (`plan.rs`: route, cost) and the
//! processor version (`versions.rs`: which changes reach a variant) both decide by them.

use crate::geometry::{self, layout};
use crate::spec::ResolvedSpec;

/// A fit: the output laid out on an input of upright size `at`, after `rotate`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    pub at: (u32, u32),
    pub rotated: (u32, u32),
    pub plan: geometry::Plan,
}

impl Fit {
    /// How many times smaller than its input the output is.
    pub fn reduction(&self) -> f64 {
        self.plan.reduction(self.rotated)
    }

    /// The decode denominator with shrink-on-load: 1/2, 1/4 or 1/8 when the output is that
    /// much smaller (1 when the spec needs the whole decode).
    pub(crate) fn denominator(&self, spec: &ResolvedSpec) -> u32 {
        if spec.decodes_whole() {
            1
        } else {
            geometry::shrink_denominator(self.reduction())
        }
    }
}

/// The fits a plan has computed, by input size: each computed once.
pub(crate) struct Fits<'a> {
    spec: &'a ResolvedSpec,
    pub(crate) done: Vec<Fit>,
}

impl<'a> Fits<'a> {
    pub(crate) fn new(spec: &'a ResolvedSpec) -> Self {
        Fits {
            spec,
            done: Vec::with_capacity(2),
        }
    }

    pub(crate) fn at(&mut self, upright: (u32, u32)) -> Fit {
        if let Some(fit) = self.done.iter().find(|f| f.at == upright) {
            return *fit;
        }
        let (rotated, plan, _) = layout(upright, self.spec, false);
        let fit = Fit {
            at: upright,
            rotated,
            plan,
        };
        self.done.push(fit);
        fit
    }
}
