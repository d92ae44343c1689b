// The server half of signed imgcas URLs for Next.js: a route handler that signs what the
// loader asks for and redirects the browser to it. Mount it as app/api/imgcas/route.js:
//
//   export { GET } from "imgcas-next/imgcas-sign-route"; // or a relative path to this file
//
// and set NEXT_PUBLIC_IMGCAS_SIGN_ROUTE=/api/imgcas. Server-only settings:
// - IMGCAS_URL: where imgcas answers;
// - IMGCAS_SIGNING_KEY: one of imgcas's signing keys;
// - IMGCAS_SIGN_WIDTHS: the widths it will sign (a comma list; next.config.js's deviceSizes
//   and imageSizes by default), so that a visitor cannot have any width made;
// - IMGCAS_SIGN_ORIGINS: the origins whose images it signs (a comma list, e.g.
//   https://cdn.shop.example), besides the site's own (NEXT_PUBLIC_IMGCAS_SITE_URL), so that a
//   visitor cannot have imgcas fetch any URL;
// - IMGCAS_SIGN_QUALITIES: the qualities it signs (a comma list; the loader's default:
//   NEXT_PUBLIC_IMGCAS_QUALITY, else 75, next/image's).
// The format it signs is the loader's (NEXT_PUBLIC_IMGCAS_FORMAT, `auto` unless set).
//
// The signature is imgcas's: HMAC-SHA256 (hex) of `/v1/image?<query sorted by name then
// value, form-encoded>` (docs/api.md, "Signed URLs").

import { createHmac } from "node:crypto";

const NEXT_WIDTHS = [16, 32, 48, 64, 96, 128, 256, 384, 640, 750, 828, 1080, 1200, 1920, 2048, 3840];

/** The signed imgcas path and query for `params` (a URLSearchParams without `sig`). */
export function signedPath(params, key) {
  const pairs = [...params.entries()].filter(([k]) => k !== "sig");
  pairs.sort(([ak, av], [bk, bv]) => (ak < bk ? -1 : ak > bk ? 1 : av < bv ? -1 : av > bv ? 1 : 0));
  const canonical = new URLSearchParams(pairs).toString();
  const sig = createHmac("sha256", key).update(`/v1/image?${canonical}`).digest("hex");
  return `/v1/image?${canonical}&sig=${sig}`;
}

/** A comma list from the environment. */
function list(name, fallback) {
  return (process.env[name] || fallback)
    .split(",")
    .map((v) => v.trim())
    .filter(Boolean);
}

/** Why `params` may not be signed, or null: only what the loader asks for is. */
export function refusal(params) {
  const keys = [...params.keys()];
  if (keys.length !== 4 || new Set(keys).size !== 4) return "url, w, q and format, once each";
  if (!["url", "w", "q", "format"].every((k) => params.has(k))) return "url, w, q and format only";
  if (!list("IMGCAS_SIGN_WIDTHS", NEXT_WIDTHS.join(",")).includes(params.get("w"))) {
    return "a width next/image does not use";
  }
  const loaderDefault = process.env.NEXT_PUBLIC_IMGCAS_QUALITY || "75";
  if (!list("IMGCAS_SIGN_QUALITIES", loaderDefault).includes(params.get("q"))) return "a quality not allowed";
  if (params.get("format") !== (process.env.NEXT_PUBLIC_IMGCAS_FORMAT || "auto")) {
    return "a format the loader does not ask for";
  }
  const site = process.env.NEXT_PUBLIC_IMGCAS_SITE_URL;
  const origins = list("IMGCAS_SIGN_ORIGINS", "").concat(site ? [new URL(site).origin] : []);
  let origin;
  try {
    origin = new URL(params.get("url")).origin;
  } catch {
    return "a source that is not a URL";
  }
  if (!origins.includes(origin)) return "a source origin not allowed (IMGCAS_SIGN_ORIGINS)";
  return null;
}

export async function GET(request) {
  const params = new URL(request.url).searchParams;
  const refused = refusal(params);
  if (refused) return new Response(`not signed: ${refused}`, { status: 400 });
  const key = process.env.IMGCAS_SIGNING_KEY;
  const base = process.env.IMGCAS_URL;
  if (!key || !base) return new Response("IMGCAS_URL and IMGCAS_SIGNING_KEY are not set", { status: 500 });
  const location = `${base.replace(/\/$/, "")}${signedPath(params, key)}`;
  return new Response(null, {
    status: 307,
    headers: { location, "cache-control": "public, max-age=86400" },
  });
}
