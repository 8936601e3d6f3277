// Builds the tokenizer.json files that validation/test_tokenizer_hf.sh checks `mindpipe`'s hf
// tokenizer with, from GPT-2's encoder.json and vocab.bpe (.ci/deps.sh fetches them): nothing is
// downloaded at test time. GPT-2's vocabulary is already written through the byte-level map that
// Hugging Face's ByteLevel pre-tokenizer uses, so its tokens and merges carry over as they are.
//
//   node hf_build.cjs STYLE GPT2_DIR OUT_DIR
//
// STYLE:
//   gpt2    ByteLevel pre-tokenizer with GPT-2's own pattern (use_regex), merges written "a b",
//           <|endoftext|> (50256) a special added token;
//   llama3  Sequence[Split(Llama-3's pattern, Isolated), ByteLevel(use_regex false)], merges as
//           pairs ["a", "b"], ignore_merges, Llama-3's special tokens added after GPT-2's 50257
//           and one added token that is not special ("MindPipe");
//   qwen2   as llama3's pre-tokenizer with Qwen2's pattern (one number a piece), merges "a b";
//   digits  Sequence[Digits(individual_digits), ByteLevel] as SmolLM2 has it, merges "a b";
//   fallback no ByteLevel: Split(Llama-3's pattern) alone, a vocabulary of <0x00>..<0xFF>, the
//           printable ASCII characters and a few merges (pairs), byte_fallback: every other
//           character becomes the <0xXX> tokens of its UTF-8 bytes.
// OUT_DIR/tokenizer.json and OUT_DIR/tokenizer_config.json (eos_token) are written.
'use strict';
const fs = require('fs');
const path = require('path');

const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = LLAMA3.replace('\\p{N}{1,3}', '\\p{N}');
const added = (id, content, special) =>
    ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special });

function build(style, gpt2Dir) {
    const vocab = JSON.parse(fs.readFileSync(path.join(gpt2Dir, 'encoder.json'), 'utf8'));
    const lines = fs.readFileSync(path.join(gpt2Dir, 'vocab.bpe'), 'utf8').split('\n');
    const merges = lines.filter((l, i) => i > 0 && l.length > 0);
    const byteLevel = (useRegex) => ({ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: useRegex });
    const model = { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
                    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab, merges };
    const json = { version: '1.0', truncation: null, padding: null, added_tokens: [added(50256, '<|endoftext|>', true)],
                   normalizer: null, pre_tokenizer: byteLevel(true), post_processor: null,
                   decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }, model };
    let eos = '<|endoftext|>';
    if (style === 'llama3') {
        model.merges = merges.map((m) => m.split(' '));
        model.ignore_merges = true;
        json.pre_tokenizer = { type: 'Sequence', pretokenizers: [
            { type: 'Split', pattern: { Regex: LLAMA3 }, behavior: 'Isolated', invert: false }, byteLevel(false)] };
        const names = ['<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>', '<|start_header_id|>', '<|end_header_id|>'];
        names.forEach((n, i) => { json.added_tokens.push(added(50257 + i, n, true)); vocab[n] = 50257 + i; });
        json.added_tokens.push(added(50257 + names.length, 'MindPipe', false));
        vocab.MindPipe = 50257 + names.length;
        eos = '<|eot_id|>';
    } else if (style === 'qwen2') {
        json.pre_tokenizer = { type: 'Sequence', pretokenizers: [
            { type: 'Split', pattern: { Regex: QWEN2 }, behavior: 'Isolated', invert: false }, byteLevel(false)] };
    } else if (style === 'digits') {
        json.pre_tokenizer = { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, byteLevel(true)] };
    } else if (style === 'fallback') {
        const v = {};
        let id = 0;
        for (let b = 0; b < 256; b++) v[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = id++;
        for (let c = 32; c < 127; c++) v[String.fromCharCode(c)] = id++;
        const pairs = [['t', 'h'], ['th', 'e'], [' ', 'the'], ['i', 'n'], ['a', 'n'], ['an', 'd'], [' ', 'and'], ['e', 'r']];
        for (const [a, b] of pairs) v[a + b] = id++;
        v['<|endoftext|>'] = id;
        Object.assign(model, { vocab: v, merges: pairs, byte_fallback: true });
        json.added_tokens = [added(id, '<|endoftext|>', true)];
        json.pre_tokenizer = { type: 'Split', pattern: { Regex: LLAMA3 }, behavior: 'Isolated', invert: false };
        json.decoder = { type: 'ByteFallback' };
    } else if (style !== 'gpt2') {
        throw new Error(`style '${style}': gpt2, llama3, digits or fallback`);
    }
    return { json, config: { eos_token: eos, bos_token: null, model_max_length: 1024 } };
}

const [style, gpt2Dir, outDir] = process.argv.slice(2);
if (!outDir) {
    console.log('usage: node hf_build.cjs gpt2|llama3|digits|fallback GPT2_DIR OUT_DIR');
    process.exit(2);
}
const { json, config } = build(style, gpt2Dir);
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'tokenizer.json'), JSON.stringify(json));
fs.writeFileSync(path.join(outDir, 'tokenizer_config.json'), JSON.stringify(config));
