//! Text as tokens: a character vocabulary of the corpus, one byte a token.

use std::collections::BTreeSet;

use super::chunk::sha256_hex;
use super::error::DataError;
use super::manifest::{SourceFile, Split};
use super::writer::{DatasetDescription, DatasetWriter};

/// Tokens are one byte: at most this many distinct symbols.
pub const MAX_SYMBOLS: usize = 256;
/// Tokens per chunk unless asked otherwise: 64 KiB of text, long enough for many windows
/// and few fetches.
pub const DEFAULT_CHUNK_TOKENS: usize = 65536;
/// The share of the text, from its end, kept for the test split (nanoGPT's 10%).
pub const TEST_FRACTION: f64 = 0.1;

/// Fewer characters are refused: too little to cut a window and a test split from.
pub const MIN_TEXT_CHARACTERS: usize = 100;

/// A corpus as a text dataset holds it: its vocabulary, and its tokens split by position.
pub struct Corpus {
    pub vocabulary: Vec<String>,
    pub train: Vec<u8>,
    pub test: Vec<u8>,
    /// Each file's name and sha256, in order.
    pub sources: Vec<SourceFile>,
}

/// `files` (a name and its bytes each) as one character-level corpus: the same rules for
/// `headroom prepare --text` and for text dropped into the page. Refused in words: a file
/// that is not UTF-8 (named), an empty or too short text, too many distinct characters.
pub fn corpus(files: &[(String, Vec<u8>)]) -> Result<Corpus, DataError> {
    if files.is_empty() {
        return Err(DataError::Import("no text files given".into()));
    }
    let mut text = String::new();
    let mut sources = Vec::new();
    for (name, bytes) in files {
        let part = std::str::from_utf8(bytes).map_err(|e| {
            DataError::Import(format!(
                "{name} is not UTF-8 text (invalid byte at offset {})",
                e.valid_up_to()
            ))
        })?;
        text.push_str(part);
        sources.push(SourceFile {
            file: name.clone(),
            sha256: sha256_hex(bytes),
        });
    }
    if text.is_empty() {
        return Err(DataError::Import("the text files are empty".into()));
    }
    let characters = text.chars().count();
    if characters < MIN_TEXT_CHARACTERS {
        return Err(DataError::Import(format!(
            "the text is too short: {characters} characters, at least {MIN_TEXT_CHARACTERS} (a tenth of it is the test split)"
        )));
    }
    let tokenizer = CharTokenizer::of(&text)?;
    let tokens = tokenizer.encode(&text).expect("the vocabulary is the text's own");
    let test_tokens = (tokens.len() as f64 * TEST_FRACTION).round() as usize;
    let (train, test) = tokens.split_at(tokens.len() - test_tokens);
    Ok(Corpus {
        vocabulary: tokenizer.vocabulary(),
        train: train.to_vec(),
        test: test.to_vec(),
        sources,
    })
}

/// What a text dataset of `corpus` named `name` is, before its chunks are written.
pub fn text_description(name: &str, corpus: &Corpus) -> DatasetDescription {
    DatasetDescription {
        name: name.to_string(),
        version: "1".into(),
        sample_shape: vec![1],
        class_names: Vec::new(),
        sources: corpus.sources.clone(),
        vocabulary: Some(corpus.vocabulary.clone()),
    }
}

/// The corpus's tokens into `writer`'s chunks, train then test.
pub fn write_corpus(writer: &mut DatasetWriter, corpus: &Corpus) -> Result<(), DataError> {
    writer.push_tokens(Split::Train, &corpus.train)?;
    writer.push_tokens(Split::Test, &corpus.test)
}

/// The corpus's symbols in a fixed order, and the text as indices into them.
#[derive(Clone, Debug, PartialEq)]
pub struct CharTokenizer {
    symbols: Vec<char>,
}

impl CharTokenizer {
    /// The distinct characters of `text`, sorted; an error past [`MAX_SYMBOLS`].
    pub fn of(text: &str) -> Result<Self, DataError> {
        let symbols: Vec<char> = text.chars().collect::<BTreeSet<_>>().into_iter().collect();
        if symbols.len() > MAX_SYMBOLS {
            return Err(DataError::Import(format!(
                "the text has {} distinct characters; tokens are one byte, so at most {MAX_SYMBOLS}",
                symbols.len()
            )));
        }
        Ok(CharTokenizer { symbols })
    }

    /// The tokenizer a manifest's vocabulary describes: one character an entry, sorted and
    /// distinct, as [`CharTokenizer::of`] writes it (encoding searches it in that order).
    pub fn from_vocabulary(vocabulary: &[String]) -> Result<Self, String> {
        let symbols = vocabulary
            .iter()
            .map(|s| {
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => Ok(c),
                    _ => Err(format!("vocabulary entry {s:?} is not one character")),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(pair) = symbols.windows(2).find(|pair| pair[0] >= pair[1]) {
            return Err(format!(
                "vocabulary entries {:?} and {:?} are out of order or repeated: the symbols must be sorted and distinct",
                pair[0], pair[1]
            ));
        }
        Ok(CharTokenizer { symbols })
    }

    pub fn vocabulary(&self) -> Vec<String> {
        self.symbols.iter().map(|c| c.to_string()).collect()
    }

    /// Tokens of `text`; `None` where a character is not in the vocabulary.
    pub fn encode(&self, text: &str) -> Option<Vec<u8>> {
        text.chars()
            .map(|c| self.symbols.binary_search(&c).ok().map(|i| i as u8))
            .collect()
    }

    /// The text of `tokens`; a token outside the vocabulary reads as U+FFFD.
    pub fn decode(&self, tokens: &[u8]) -> String {
        tokens
            .iter()
            .map(|&t| self.symbols.get(usize::from(t)).copied().unwrap_or('\u{FFFD}'))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // In the browser (wasm-pack test, tests/run-all) these run as wasm-bindgen tests.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn tokens_round_trip_through_the_vocabulary() {
        let text = "To be, or not to be: ñ\n";
        let tokenizer = CharTokenizer::of(text).unwrap();
        let tokens = tokenizer.encode(text).unwrap();
        assert_eq!(tokens.len(), text.chars().count());
        assert_eq!(tokenizer.decode(&tokens), text);
        let again = CharTokenizer::from_vocabulary(&tokenizer.vocabulary()).unwrap();
        assert_eq!(again, tokenizer);
        let unsorted = ["b", "a"].map(String::from);
        let error = CharTokenizer::from_vocabulary(&unsorted).unwrap_err();
        assert!(error.contains("sorted and distinct"), "{error}");
        assert_eq!(tokenizer.encode("z"), None);
    }

    #[test]
    fn more_symbols_than_a_byte_holds_is_an_error() {
        let text: String = (0..300u32).filter_map(|i| char::from_u32(0x4e00 + i)).collect();
        let error = CharTokenizer::of(&text).unwrap_err().to_string();
        assert!(error.contains("300 distinct characters"), "{error}");
    }
}
