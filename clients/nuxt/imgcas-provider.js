// imgcas as a Nuxt Image provider (@nuxt/image). In nuxt.config:
//
//   image: {
//     providers: {
//       imgcas: {
//         provider: "~/providers/imgcas-provider.js", // this file
//         options: { baseURL: "https://img.example.com", siteURL: "https://www.example.com",
//                    quality: "auto" }, // optional: the quality of images that set none
//       },
//     },
//     provider: "imgcas",
//   }
//
// Each width Nuxt asks for becomes an imgcas variant by URL, made once. Modifiers map onto
// imgcas's options: width → w, height → h, fit (cover, contain, fill, inside → contain,
// outside → cover), quality → q (a number, or `auto` / `auto:<level>`: imgcas chooses per image
// the fewest bytes that keep the look; the `quality` option is the default of images without
// one), format (webp, avif, jpeg, png, gif; auto by default).

const FITS = { cover: "cover", contain: "contain", fill: "fill", inside: "contain", outside: "cover" };

export function getImage(src, { modifiers = {}, baseURL, siteURL, quality } = {}) {
  if (!baseURL) throw new Error("imgcas provider: set options.baseURL");
  const source = /^https?:\/\//.test(src) ? src : new URL(src, siteURL).toString();
  const query = new URLSearchParams({ url: source });
  if (modifiers.width) query.set("w", String(modifiers.width));
  if (modifiers.height) query.set("h", String(modifiers.height));
  if (modifiers.fit) {
    const fit = FITS[modifiers.fit];
    if (!fit) throw new Error(`imgcas provider: fit ${modifiers.fit} is not supported`);
    query.set("fit", fit);
  }
  const q = modifiers.quality || quality;
  if (q) query.set("q", String(q));
  query.set("format", modifiers.format || "auto");
  return { url: `${baseURL.replace(/\/$/, "")}/v1/image?${query.toString()}` };
}
