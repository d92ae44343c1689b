"use client";

import { useEffect } from "react";

// Once every image has loaded, writes what the browser made of them into the page
// (data-images on <body>), where a headless browser's DOM dump shows it. A loaded image's
// natural size is known only once the browser has decoded its header.
export default function Probe() {
  useEffect(() => {
    const images = [...document.images];
    const loaded = (img) =>
      img.complete
        ? Promise.resolve()
        : new Promise((done) => {
            img.addEventListener("load", done, { once: true });
            img.addEventListener("error", done, { once: true });
          });
    Promise.all(images.map(loaded)).then(() => {
      document.body.dataset.images = JSON.stringify(
        images.map((img) => ({
          currentSrc: img.currentSrc,
          srcset: img.srcset,
          naturalWidth: img.naturalWidth,
          naturalHeight: img.naturalHeight,
        })),
      );
    });
  }, []);
  return null;
}
