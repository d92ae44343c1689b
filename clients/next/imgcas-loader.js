// imgcas as Next.js's image loader (`images.loaderFile` in next.config.js).
//
// next/image asks this function for one URL per width of its srcset; each becomes an imgcas
// variant by URL, made once and served from then on by imgcas (and any CDN in front).
//
// Settings, read when the app is built (Next.js inlines NEXT_PUBLIC_ variables):
// - NEXT_PUBLIC_IMGCAS_URL: where imgcas answers, e.g. https://img.example.com (required);
// - NEXT_PUBLIC_IMGCAS_FORMAT: the output format, `auto` unless set (AVIF or WebP as the
//   browser accepts);
// - NEXT_PUBLIC_IMGCAS_QUALITY: the quality of an image whose component sets none, 75
//   (next/image's own default) unless set; `auto` or `auto:<level>` (best, good, eco, low)
//   lets imgcas choose per image the fewest bytes that keep the look asked for;
// - NEXT_PUBLIC_IMGCAS_SIGN_ROUTE: when imgcas signs its URLs (IMGCAS_SIGNING_KEY), the path
//   of the app's route that signs them (`imgcas-sign-route.js`), e.g. /api/imgcas; the
//   key itself never reaches the browser.
//
// A `src` that is a path (`/photos/a.jpg`) is taken as the app's own file, and imgcas fetches
// it from the app's public URL (NEXT_PUBLIC_IMGCAS_SITE_URL).

const DEFAULT_QUALITY = 75;

/** The absolute URL of an image `src`. */
function absolute(src) {
  if (/^https?:\/\//.test(src)) return src;
  const site = process.env.NEXT_PUBLIC_IMGCAS_SITE_URL;
  if (!site) {
    throw new Error(`imgcas loader: ${src} is a path; set NEXT_PUBLIC_IMGCAS_SITE_URL`);
  }
  return new URL(src, site).toString();
}

/** The imgcas query for one width of an image. */
export function imgcasQuery({ src, width, quality }) {
  const query = new URLSearchParams({
    url: absolute(src),
    w: String(width),
    q: String(quality || process.env.NEXT_PUBLIC_IMGCAS_QUALITY || DEFAULT_QUALITY),
    format: process.env.NEXT_PUBLIC_IMGCAS_FORMAT || "auto",
  });
  return query.toString();
}

export default function imgcasLoader({ src, width, quality }) {
  const query = imgcasQuery({ src, width, quality });
  const signRoute = process.env.NEXT_PUBLIC_IMGCAS_SIGN_ROUTE;
  if (signRoute) return `${signRoute}?${query}`;
  const base = process.env.NEXT_PUBLIC_IMGCAS_URL;
  if (!base) throw new Error("imgcas loader: set NEXT_PUBLIC_IMGCAS_URL");
  return `${base.replace(/\/$/, "")}/v1/image?${query}`;
}
