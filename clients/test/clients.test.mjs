// The framework helpers' own functions, against what imgcas expects of a URL.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";

import imgcasLoader, { imgcasQuery } from "../next/imgcas-loader.js";
import { GET, signedPath } from "../next/imgcas-sign-route.js";
import { getImage } from "../nuxt/imgcas-provider.js";

const PHOTO = "https://shop.example/p/1.jpg?v=2";

test("the Next.js loader asks imgcas for the width next/image wants", () => {
  process.env.NEXT_PUBLIC_IMGCAS_URL = "https://img.example/";
  delete process.env.NEXT_PUBLIC_IMGCAS_SIGN_ROUTE;
  const url = new URL(imgcasLoader({ src: PHOTO, width: 640, quality: 60 }));
  assert.equal(url.origin + url.pathname, "https://img.example/v1/image");
  assert.equal(url.searchParams.get("url"), PHOTO);
  assert.equal(url.searchParams.get("w"), "640");
  assert.equal(url.searchParams.get("q"), "60");
  assert.equal(url.searchParams.get("format"), "auto");
  // A quality left out is next/image's default, 75, or the configured one (q=auto).
  assert.equal(new URL(imgcasLoader({ src: PHOTO, width: 32 })).searchParams.get("q"), "75");
  process.env.NEXT_PUBLIC_IMGCAS_QUALITY = "auto:eco";
  assert.equal(new URL(imgcasLoader({ src: PHOTO, width: 32 })).searchParams.get("q"), "auto:eco");
  assert.equal(new URL(imgcasLoader({ src: PHOTO, width: 32, quality: 60 })).searchParams.get("q"), "60");
  delete process.env.NEXT_PUBLIC_IMGCAS_QUALITY;
});

test("a path is the app's own file, fetched from its public URL", () => {
  process.env.NEXT_PUBLIC_IMGCAS_SITE_URL = "https://www.shop.example";
  const query = new URLSearchParams(imgcasQuery({ src: "/photos/a.jpg", width: 100 }));
  assert.equal(query.get("url"), "https://www.shop.example/photos/a.jpg");
  delete process.env.NEXT_PUBLIC_IMGCAS_SITE_URL;
  assert.throws(() => imgcasQuery({ src: "/photos/a.jpg", width: 100 }), /SITE_URL/);
});

test("with a signing route, the loader points at it and the route signs as imgcas checks", async () => {
  process.env.NEXT_PUBLIC_IMGCAS_SIGN_ROUTE = "/api/imgcas";
  const path = imgcasLoader({ src: PHOTO, width: 640 });
  assert.ok(path.startsWith("/api/imgcas?"));
  process.env.IMGCAS_URL = "https://img.example";
  process.env.IMGCAS_SIGNING_KEY = "a-signing-key-of-at-least-16-bytes";
  process.env.IMGCAS_SIGN_ORIGINS = "https://shop.example";
  const answer = await GET(new Request(`https://www.shop.example${path}`));
  assert.equal(answer.status, 307);
  const location = new URL(answer.headers.get("location"));
  // imgcas's rule: HMAC-SHA256 (hex) of the path and the query without sig, sorted.
  const pairs = [...location.searchParams.entries()].filter(([k]) => k !== "sig").sort();
  const message = `/v1/image?${new URLSearchParams(pairs).toString()}`;
  const expected = createHmac("sha256", process.env.IMGCAS_SIGNING_KEY).update(message).digest("hex");
  assert.equal(location.searchParams.get("sig"), expected);
  assert.equal(signedPath(new URLSearchParams(pairs), process.env.IMGCAS_SIGNING_KEY), `${location.pathname}${location.search}`);
  // Only what the loader asks for is signed: no other width, quality, format or source.
  const ask = (query) => GET(new Request(`https://www.shop.example/api/imgcas?${query}`));
  const photo = encodeURIComponent(PHOTO);
  for (const query of [
    `url=${photo}&w=641&q=75&format=auto`,
    `url=${photo}&w=640&q=100&format=auto`,
    `url=${photo}&w=640&q=75&format=json`,
    `url=${encodeURIComponent("https://elsewhere.example/x.jpg")}&w=640&q=75&format=auto`,
    `url=${photo}&w=640&w=3840&q=75&format=auto`,
    `url=${photo}&w=640&q=75&format=auto&fit=fill`,
  ]) {
    assert.equal((await ask(query)).status, 400, query);
  }
  assert.equal((await ask(`url=${photo}&w=640&q=75&format=auto`)).status, 307);
  // With q=auto as the loader's default, that is what the route signs.
  process.env.NEXT_PUBLIC_IMGCAS_QUALITY = "auto";
  assert.equal((await ask(`url=${photo}&w=640&q=auto&format=auto`)).status, 307);
  assert.equal((await ask(`url=${photo}&w=640&q=75&format=auto`)).status, 400);
  delete process.env.NEXT_PUBLIC_IMGCAS_QUALITY;
  delete process.env.NEXT_PUBLIC_IMGCAS_SIGN_ROUTE;
});

test("the Nuxt provider maps its modifiers onto imgcas's options", () => {
  const { url } = getImage(PHOTO, {
    modifiers: { width: 300, height: 200, fit: "inside", quality: 70, format: "webp" },
    baseURL: "https://img.example",
  });
  const parsed = new URL(url);
  assert.equal(parsed.pathname, "/v1/image");
  assert.deepEqual(Object.fromEntries(parsed.searchParams), {
    url: PHOTO,
    w: "300",
    h: "200",
    fit: "contain",
    q: "70",
    format: "webp",
  });
  assert.throws(() => getImage(PHOTO, { modifiers: { fit: "weird" }, baseURL: "https://img.example" }), /fit/);
  // The provider's quality option is the default of images that set none.
  const auto = (modifiers) =>
    new URL(getImage(PHOTO, { modifiers, baseURL: "https://img.example", quality: "auto" }).url).searchParams.get("q");
  assert.equal(auto({ width: 300 }), "auto");
  assert.equal(auto({ width: 300, quality: 55 }), "55");
});
