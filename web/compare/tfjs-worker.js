// TensorFlow.js 4.22.0 on the work Headroom's compare worker does (classic worker: the
// UMD builds share one global `tf`, which the backends register with).
importScripts(
  "../node_modules/@tensorflow/tfjs/dist/tf.min.js",
  "../node_modules/@tensorflow/tfjs-backend-webgpu/dist/tf-backend-webgpu.min.js",
  "../node_modules/@tensorflow/tfjs-backend-wasm/dist/tf-backend-wasm.min.js",
);

function buildModel(spec, pixels, classes) {
  const side = Math.sqrt(pixels);
  const init = { kernelInitializer: "glorotUniform", biasInitializer: "zeros" };
  const model = tf.sequential();
  if (spec.model === "mlp") {
    model.add(tf.layers.dense({ inputShape: [pixels], units: spec.layers[0], activation: "relu", ...init }));
    for (const units of spec.layers.slice(1)) model.add(tf.layers.dense({ units, activation: "relu", ...init }));
  } else {
    spec.layers.forEach((filters, i) => {
      const shape = i === 0 ? { inputShape: [side, side, 1] } : {};
      model.add(tf.layers.conv2d({ ...shape, filters, kernelSize: 3, padding: "same", activation: "relu", ...init }));
      model.add(tf.layers.maxPooling2d({ poolSize: 2, strides: 2 }));
    });
    model.add(tf.layers.flatten());
  }
  model.add(tf.layers.dense({ units: classes, ...init }));
  return model;
}

function inputs(spec, images, count, pixels) {
  const side = Math.sqrt(pixels);
  return tf.tensor(images, spec.model === "mlp" ? [count, pixels] : [count, side, side, 1]);
}

function memory() {
  const m = tf.memory();
  const wasm = tf.getBackend() === "wasm" ? tf.backend().wasm.HEAPU8.buffer.byteLength : null;
  return { in_use: m.numBytesInGPU ?? null, reserved: m.numBytesAllocatedInGPU ?? null, tensors: m.numTensors, wasm_bytes: wasm };
}

async function evaluate(spec, model, test) {
  let lossSum = 0;
  let correct = 0;
  const count = test.labels.length;
  for (let start = 0; start < count; start += spec.batch) {
    const n = Math.min(spec.batch, count - start);
    const [loss, hits] = tf.tidy(() => {
      const x = inputs(spec, test.images.subarray(start * test.pixels, (start + n) * test.pixels), n, test.pixels);
      const labels = tf.tensor1d(test.labels.subarray(start, start + n), "int32");
      const logits = model.predict(x);
      const loss = tf.losses.softmaxCrossEntropy(tf.oneHot(labels, test.classes), logits).mul(n);
      return [loss, logits.argMax(1).equal(labels).sum()];
    });
    lossSum += (await loss.data())[0];
    correct += (await hits.data())[0];
    tf.dispose([loss, hits]);
  }
  return { loss: lossSum / count, accuracy: correct / count, samples: count };
}

async function run(spec) {
  const began = performance.now();
  if (spec.backend === "wasm") tf.wasm.setWasmPaths(new URL("../node_modules/@tensorflow/tfjs-backend-wasm/dist/", self.location.href).href);
  if (!(await tf.setBackend(spec.backend))) throw new Error(`TF.js backend ${spec.backend} did not initialize`);
  await tf.ready();
  const { loadSamples } = await import("./fashion.js");
  const train = await loadSamples(spec.data, "train", spec.steps * spec.batch);
  const test = await loadSamples(spec.data, "test", spec.eval_samples);
  const model = buildModel(spec, train.pixels, train.classes);
  const optimizer = tf.train.adam(spec.learning_rate, 0.9, 0.999, spec.epsilon);
  const steps = [];
  for (let step = 0; step < spec.steps; step++) {
    const started = performance.now();
    const from = step * spec.batch;
    const loss = tf.tidy(() => {
      const x = inputs(spec, train.images.subarray(from * train.pixels, (from + spec.batch) * train.pixels), spec.batch, train.pixels);
      const y = tf.oneHot(tf.tensor1d(train.labels.subarray(from, from + spec.batch), "int32"), train.classes);
      return optimizer.minimize(() => tf.losses.softmaxCrossEntropy(y, model.apply(x, { training: true })), true);
    });
    // Reading the loss waits for the step, as Headroom's step does.
    const value = (await loss.data())[0];
    loss.dispose();
    steps.push({ loss: value, seconds: (performance.now() - started) / 1000, memory: memory(), at: (performance.now() - began) / 1000 });
  }
  const evaluation = await evaluate(spec, model, test);
  return {
    framework: "tfjs",
    backend: tf.getBackend(),
    threads: spec.backend === "wasm" ? tf.wasm.getThreadsCount() : null,
    steps,
    eval: evaluation,
  };
}

self.onmessage = ({ data }) =>
  run(data).then(
    (result) => self.postMessage({ result }),
    (error) => self.postMessage({ error: error?.message ?? String(error) }),
  );
