// Runs the wasm module off the page's thread: the page stays responsive while it works.
import init, { DataStream } from "../pkg/headroom.js";
import { Reply, Request } from "./protocol.js";

const loaded = init();
loaded.then(
  () => self.postMessage({ type: Reply.READY }),
  (error) => self.postMessage({ type: Reply.ERROR, message: `The wasm module did not load: ${describe(error)}` }),
);

function describe(error) {
  return error?.message ?? String(error);
}

async function stream({ url, split, batch, options }) {
  const source = await DataStream.open(url, options);
  const figures = await source.scanEpoch(split, 0, batch);
  return { type: Reply.STREAMED, manifest: source.manifest(), figures };
}

self.onmessage = async ({ data }) => {
  try {
    await loaded;
    if (data.type !== Request.STREAM) throw new Error(`unknown request ${data.type}`);
    self.postMessage(await stream(data));
  } catch (error) {
    self.postMessage({ type: Reply.ERROR, message: describe(error) });
  }
};
