// next/image with imgcas as its loader. The loader file is copied beside this config by the
// test (tests/it/nextjs.rs) from ../imgcas-loader.js; an app of your own points
// `loaderFile` at wherever it keeps its copy.
export default {
  images: {
    loader: "custom",
    loaderFile: "./imgcas-loader.js",
  },
};
