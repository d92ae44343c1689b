//! What an SVG document amounts to once its references are followed (`<use>`, `url(#id)`,
//! `<tref>`), counted on the XML before usvg converts it: the elements a copy makes, and the
//! text it will lay out, with the work of that layout ([`layout_work`]). `svg.rs` refuses a
//! document by these counts before any conversion.

use std::collections::HashMap;

use resvg::usvg::roxmltree;

use crate::error::ProcessError;

/// How deep elements may nest (usvg converts groups recursively).
pub const MAX_DEPTH: usize = 96;
/// Elements once every reference is counted as the copy it makes.
pub const MAX_EXPANDED: u64 = 200_000;

fn undecodable(what: impl std::fmt::Display) -> ProcessError {
    super::undecodable("SVG", what)
}

/// The elements a document amounts to once references are followed: each element counts
/// itself, its children, and every element it references (`href="#id"`, `url(#id)`) again,
/// as usvg copies a `<use>` target or a paint server per reference.
pub(super) struct Expansion<'d, 'input> {
    root: roxmltree::Node<'d, 'input>,
    by_id: HashMap<&'d str, roxmltree::Node<'d, 'input>>,
    /// Counted elements and characters of text (by node id, and whether it stands inside
    /// a text: its characters count only there); `None` while being counted (a reference
    /// loop, which usvg cuts: counted as nothing).
    counted: HashMap<(roxmltree::NodeId, bool), Option<Counted>>,
}

/// What an element amounts to once its references are followed.
#[derive(Clone, Copy, Default)]
struct Counted {
    elements: u64,
    /// Characters usvg lays out as text: those inside `<text>`, and what a `<tref>` copies.
    chars: u64,
    /// The work of laying its texts out ([`layout_work`] of each `<text>`'s characters).
    layout: u64,
}

/// The work of laying out one `<text>` of `chars` characters, in the units of
/// [`drawing_work`]. usvg's layout is quadratic in a text's length (each cluster looks its
/// character up from the text's start): measured on usvg 0.49 here, 1,000 characters took
/// 4 ms, 20,000 took 0.7 s (1.65 ns × chars²), 90,000 took 11–13 s. Charged at about twice
/// that, so that a text is refused before it is laid out, never after.
pub(crate) fn layout_work(chars: u64) -> u64 {
    (chars.saturating_mul(chars) / 4).saturating_add(chars.saturating_mul(300))
}

impl<'d, 'input> Expansion<'d, 'input> {
    pub(super) fn new(document: &'d roxmltree::Document<'input>) -> Self {
        let by_id = document
            .descendants()
            .filter_map(|n| n.attribute("id").map(|id| (id, n)))
            .collect();
        Expansion {
            root: document.root_element(),
            by_id,
            counted: HashMap::new(),
        }
    }

    /// Refuses a document over [`MAX_EXPANDED`] elements; else the work of laying out its
    /// texts, every copy counted.
    pub(super) fn check(mut self) -> Result<u64, ProcessError> {
        self.count(self.root, 0, false).map(|c| c.layout)
    }

    /// `in_text`: the node is inside a `<text>` (its character data is laid out).
    fn count(
        &mut self,
        node: roxmltree::Node<'d, 'input>,
        hops: usize,
        in_text: bool,
    ) -> Result<Counted, ProcessError> {
        // Tree depth is checked already; references add hops (a chain of `use`s).
        if hops > 4 * MAX_DEPTH {
            return Err(undecodable("references chain too deep"));
        }
        let name = node.tag_name().name();
        let in_text = in_text || name == "text";
        let key = (node.id(), in_text);
        match self.counted.get(&key) {
            Some(Some(n)) => return Ok(*n),
            Some(None) => return Ok(Counted::default()),
            None => {}
        }
        self.counted.insert(key, None);
        let mut total = Counted {
            elements: 1,
            chars: 0,
            layout: 0,
        };
        if in_text {
            let own: usize = node
                .children()
                .filter(|c| c.is_text())
                .map(|c| c.text().map_or(0, |t| t.chars().count()))
                .sum();
            total.chars = own as u64;
        }
        let targets: Vec<roxmltree::Node<'d, 'input>> = node
            .attributes()
            .flat_map(|a| references(a.value()))
            .filter_map(|id| self.by_id.get(id).copied())
            .collect();
        // A `tref` copies its target's character data into the text.
        if name == "tref" && in_text {
            for target in &targets {
                let copied: usize = target
                    .descendants()
                    .filter(|d| d.is_text())
                    .map(|d| d.text().map_or(0, |t| t.chars().count()))
                    .sum();
                total.chars = total.chars.saturating_add(copied as u64);
            }
        }
        let children = node.children().filter(|c| c.is_element());
        for next in children
            .map(|c| (c, in_text))
            .chain(targets.into_iter().map(|t| (t, false)))
        {
            let counted = self.count(next.0, hops + 1, next.1)?;
            total.elements = total.elements.saturating_add(counted.elements);
            total.chars = total.chars.saturating_add(counted.chars);
            total.layout = total.layout.saturating_add(counted.layout);
            if total.elements > MAX_EXPANDED {
                return Err(undecodable(format!(
                    "more than {MAX_EXPANDED} elements once its references are followed"
                )));
            }
        }
        // A text is laid out as a whole: its characters, nested spans' included.
        if name == "text" {
            total.layout = total.layout.saturating_add(layout_work(total.chars));
        }
        self.counted.insert(key, Some(total));
        Ok(total)
    }
}

/// The ids an attribute value refers to: `#id` (an `href`) and every `url(#id)`.
pub(super) fn references(value: &str) -> Vec<&str> {
    let mut ids = Vec::new();
    if let Some(id) = value.strip_prefix('#') {
        ids.push(id.trim());
    }
    let mut rest = value;
    while let Some(at) = rest.find("url(") {
        rest = &rest[at + 4..];
        let inner = rest.split(')').next().unwrap_or_default();
        let inner = inner.trim().trim_matches(|c| c == '"' || c == '\'');
        if let Some(id) = inner.strip_prefix('#') {
            ids.push(id);
        }
    }
    ids
}
