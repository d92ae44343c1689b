//! Walking a map a page at a time ([`WALK_PAGE`] rows), for the code that reads a whole map:
//! one reader per map ([`UrlPages`], [`OriginalPages`], [`VariantKeyPages`],
//! [`FingerprintPages`]) keeps the cursor, so a walk is
//! `while let Some(page) = pages.next().await? { … }` and never holds more than a page.

use super::{
    Fingerprint, Fingerprints, MapError, OriginalInfo, Originals, UrlEntry, UrlMap, VariantKey,
    Variants, WALK_PAGE,
};
use crate::hash::ContentHash;

/// A reader of one map, page by page: `$method` reads the page after the cursor (`$arg`
/// turns the kept cursor into its argument), `$key` takes the cursor from a page's last row.
macro_rules! pages {
    ($(#[$doc:meta])* $name:ident: $role:ident::$method:ident -> $item:ty,
     cursor $cursor:ty, |$after:ident| $arg:expr, |$last:ident| $key:expr) => {
        $(#[$doc])*
        pub struct $name<'a, M: ?Sized> {
            maps: &'a M,
            after: Option<$cursor>,
            ended: bool,
        }

        impl<'a, M: $role + ?Sized> $name<'a, M> {
            pub fn new(maps: &'a M) -> Self {
                Self {
                    maps,
                    after: None,
                    ended: false,
                }
            }

            /// The next page; `None` once the map is walked to its end.
            pub async fn next(&mut self) -> Result<Option<Vec<$item>>, MapError> {
                if self.ended {
                    return Ok(None);
                }
                let $after = &self.after;
                let page = self.maps.$method($arg, WALK_PAGE).await?;
                match page.last() {
                    Some($last) => {
                        self.after = Some($key);
                        Ok(Some(page))
                    }
                    None => {
                        self.ended = true;
                        Ok(None)
                    }
                }
            }
        }
    };
}

pages!(
    /// The URL map's entries, in the backend's key order.
    UrlPages: UrlMap::urls_page -> (String, UrlEntry),
    cursor String, |after| after.as_deref(), |last| last.0.clone()
);

pages!(
    /// The originals index's entries, in hash order.
    OriginalPages: Originals::originals_page -> (ContentHash, OriginalInfo),
    cursor ContentHash, |after| *after, |last| last.0
);

pages!(
    /// The variant keys, one original's together, originals in hash order.
    VariantKeyPages: Variants::variant_keys_page -> VariantKey,
    cursor VariantKey, |after| after.as_ref(), |last| last.clone()
);

pages!(
    /// The current fingerprints of pictures, in hash order.
    FingerprintPages: Fingerprints::fingerprints_page -> (ContentHash, Fingerprint),
    cursor ContentHash, |after| *after, |last| last.0
);
