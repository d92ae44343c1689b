// The server half of signed imgcas URLs for Next.js: a route handler that signs what the
// loader asks for and redirects the browser to it. Mount it as app/api/imgcas/route.js:
//
//   export { GET } from "imgcas-next/imgcas-sign-route"; // or a relative path to this file
//
// and set NEXT_PUBLIC_IMGCAS_SIGN_ROUTE=/api/imgcas. Server-only settings:
// - IMGCAS_URL: where imgcas answers;
// - IMGCAS_SIGNING_KEY: one of imgcas's signing keys;
// - IMGCAS_SIGN_WIDTHS: the widths it will sign (a comma list; next.config.js's deviceSizes
//   and imageSizes by default), so that a visitor cannot have any width made.
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

export async function GET(request) {
  const params = new URL(request.url).searchParams;
  const allowed = (process.env.IMGCAS_SIGN_WIDTHS || NEXT_WIDTHS.join(","))
    .split(",")
    .map((w) => w.trim());
  const keys = [...params.keys()];
  const known = keys.every((k) => ["url", "w", "q", "format"].includes(k));
  if (!known || !allowed.includes(params.get("w") || "")) {
    return new Response("width or option not allowed", { status: 400 });
  }
  const key = process.env.IMGCAS_SIGNING_KEY;
  const base = process.env.IMGCAS_URL;
  if (!key || !base) return new Response("IMGCAS_URL and IMGCAS_SIGNING_KEY are not set", { status: 500 });
  const location = `${base.replace(/\/$/, "")}${signedPath(params, key)}`;
  return new Response(null, {
    status: 307,
    headers: { location, "cache-control": "public, max-age=86400" },
  });
}
