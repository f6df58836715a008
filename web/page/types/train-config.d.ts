// Generated from the Rust types by crate/train/config.rs's test
// the_js_config_type_is_generated_from_these_types; do not edit. After changing a type, run
//   HEADROOM_WRITE_TYPES=1 cargo test --lib js_config_type
// Every field of a struct with #[serde(default)] is optional: Rust fills in the default.

/** std::time::Duration as serde writes it. */
export interface StdDuration {
    secs: number;
    nanos: number;
}

/**
 * One run's settings; the same struct drives the CLI and the page.
 * A field it does not know is refused, not ignored: the page, the comparison worker and a
 * saved run cannot drift from this type without an error naming the field.
 */
export interface TrainConfig {
    model?: ModelConfig;
    optimizer?: OptimizerConfig;
    /**
     * Samples per optimizer step.
     */
    effective_batch?: number;
    /**
     * Samples per forward/backward pass; `effective_batch / micro_batch` passes are
     * accumulated into one step. `None`: the planner picks the largest that fits the cap
     * (the effective batch without a cap).
     */
    micro_batch?: number | null;
    duration?: Duration;
    /**
     * Activation checkpointing: keep only each segment's input (a layer of the MLP, a
     * conv block of the CNN) and recompute the segment during backward: less memory, one
     * more forward pass, same gradients. `None` (auto): under a cap the planner decides,
     * by what it costs against the other settings that fit; without a cap, off.
     */
    checkpointing?: boolean | null;
    /**
     * `None` (auto): under a cap the planner picks f16 where the device has it and it
     * is the faster setting that fits; without a cap, f32.
     */
    precision?: Precision | null;
    /**
     * How Adam(W) keeps its two moments: f32, or 8 bits a value (block-wise dynamic
     * quantisation, `train::quantize`). `None` (auto): under a cap the planner may pick
     * 8 bits where f32 does not fit; without a cap, f32. SGD keeps f32.
     */
    moments?: Moments | null;
    /**
     * Hard cap on the bytes the run holds (device reservation plus data pipeline);
     * the enforcer halves the micro-batch when a step would pass it.
     */
    cap?: number | null;
    /**
     * Measure the peak of probe steps before step 1 and plan on it (see
     * `train::calibrate`); off, the plan rests on the tensor census alone.
     */
    calibrate?: boolean;
    /**
     * Evaluate on the test split every this many steps (0: at the end of each epoch).
     */
    eval_every?: number;
    /**
     * Whether to evaluate at all (benchmarks measure training alone).
     */
    evaluate?: boolean;
    /**
     * Evaluate on at most this many test samples, the first the test stream yields
     * (without shuffling, the first of the split): a quick, repeatable evaluation where
     * the whole split would take longer than the training.
     */
    eval_samples?: number | null;
    /**
     * Whether evaluation runs with the training stream's chunks released (fetched again
     * after it); `None`: the planner decides, releasing them only where the cap needs it.
     */
    pause_training_for_eval?: boolean | null;
    seed?: number;
    stream?: StreamOptions;
    /**
     * The GPT writes a sample every this many steps (0: only at the end).
     */
    sample_every?: number;
    sample?: SampleConfig;
}

export type ModelConfig = { kind: "mlp"; hidden: number[] } | { kind: "cnn"; channels: number[] } | ({ kind: "gpt" } & GptShape);

/**
 * The GPT's size: `layers` blocks of `width` features split over `heads`, reading
 * `context` tokens.
 */
export interface GptShape {
    layers: number;
    heads: number;
    width: number;
    context: number;
}

export interface OptimizerConfig {
    kind?: OptimizerKind;
    learning_rate?: number;
    /**
     * SGD momentum; ignored by Adam(W).
     */
    momentum?: number;
    weight_decay?: number;
    /**
     * Adam(W)'s epsilon.
     */
    epsilon?: number;
    /**
     * Adam(W)'s second-moment decay (nanoGPT's small models use 0.99).
     */
    beta_2?: number;
    warmup_steps?: number;
    /**
     * The learning rate at the end of the run, as a fraction of `learning_rate`.
     */
    final_lr_fraction?: number;
    /**
     * Clip the gradients' global L2 norm to this value.
     */
    clip_norm?: number | null;
}

export type OptimizerKind = "adam" | "adamw" | "sgd";

/**
 * How parameters and activations are stored.
 */
export type Precision = "f32" | "f16" | "f16-pure";

/**
 * How Adam's two moments are kept between steps.
 */
export type Moments = "f32" | "8bit";

/**
 * How long to train: whole epochs, or a number of optimizer steps.
 */
export type Duration = { epochs: number } | { steps: number };

export interface StreamOptions {
    /**
     * Chunks fetched ahead of the one being consumed.
     */
    prefetch?: number;
    seed?: number;
    shuffle?: boolean;
    retry?: RetryPolicy;
    /**
     * Tokens per sample of a text dataset: the model's context plus the one token its
     * last position predicts. The stream cuts text chunks into windows this long; images
     * ignore it.
     */
    window?: number | null;
    /**
     * Training chunks a reader holds open at once, each sample drawn from one of them
     * (seeded, in proportion to what each has left), so that a batch mixes samples from
     * that many chunks. `None`: [`TEXT_MIX`] for text, whose chunks are runs of one text,
     * and 1 for records, which preparation already spread over the chunks.
     */
    mix?: number | null;
}

/**
 * Bounded retries with exponential backoff, and a per-attempt deadline that turns a
 * stalled connection into an ordinary, retryable failure.
 */
export interface RetryPolicy {
    max_attempts: number;
    initial_backoff: StdDuration;
    max_backoff: StdDuration;
    attempt_timeout: StdDuration;
}

/**
 * What the GPT's samples start from and how they are drawn.
 */
export interface SampleConfig {
    prompt?: string;
    generation?: SampleSettings;
}

export interface SampleSettings {
    /**
     * Tokens to generate after the prompt.
     */
    tokens: number;
    /**
     * Below 1 sharpens the distribution, above 1 flattens it; 0 is argmax.
     */
    temperature: number;
    seed: number;
}
