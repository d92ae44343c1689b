import Image from "next/image";

import Probe from "./probe";

// The photo's URL is the server's to know at request time (IMGCAS_EXAMPLE_IMAGE).
export const dynamic = "force-dynamic";

export default function Page() {
  const src = process.env.IMGCAS_EXAMPLE_IMAGE;
  return (
    <main>
      {/* Full width: the browser picks a srcset width by the viewport. */}
      <Image
        src={src}
        alt="a photo, full width"
        width={2000}
        height={1500}
        sizes="100vw"
        priority
        style={{ width: "100%", height: "auto", display: "block" }}
      />
      {/* A fixed 300 px: the 1x candidate whatever the viewport. */}
      <Image src={src} alt="a photo, 300 px" width={300} height={225} priority />
      <Probe />
    </main>
  );
}
