// The reference side of validation/test_tokenizer_hf.sh: @huggingface/tokenizers (npm, a pure JS
// port of the Rust `tokenizers` library's encoding; .ci/deps.sh installs it) against what
// `mindpipe prep --tokenizer hf:DIR` wrote.
//
//   node hf_check.cjs ids DIR TEXT IDS LABEL [WIDTH]   encode(TEXT) with DIR/tokenizer.json == IDS
//   node hf_check.cjs decode DIR IDS TEXT LABEL [WIDTH] decode(IDS) with DIR/tokenizer.json == TEXT's bytes
//   node hf_check.cjs filter TABLE TEXT OUT    TEXT less the characters whose class differs (below)
//
// The character classes of the patterns (\s, \p{L}, \p{N}) differ between the two sides: ours are
// those of the Rust libraries (src/tok/unicode_gpt2.c: Unicode 16.0, \s = White_Space, checked
// against tiktoken's engine by test_tokenizer.sh), the JS library's are node's RegExp's (its ICU's
// Unicode version, and JS's \s, which has U+FEFF and lacks U+0085). `filter` removes from a text every
// character on which the two disagree, counting them, so that the fuzzed corpora compare the
// tokenizers rather than the Unicode versions; it fails when more than FILTER_MAX code points differ
// (a broken table must not pass by filtering everything away).
//
// IDS is a file of little-endian ids (the data file's /train then /val), uint16 or, with WIDTH 4,
// uint32 (prep's files of more than 65536 ids; test_tokenizer_hf_wide.sh). encode adds no
// special tokens (add_special_tokens false): prep adds no BOS or EOS. A check prints "PASS what" or
// "FAIL what"; the exit status is 0 when it passed, 1 when it failed, 2 on a usage error. TEXT must
// be valid UTF-8: the JS library reads a JS string, and turning other bytes into one would replace
// them (tiktoken_check.cjs says more), so such text is refused rather than compared with a lossy copy.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const npmDir = process.env.MINDPIPE_NPM_DIR || path.join(os.homedir(), '.cache', 'mindpipe', 'npm');
const pkgDir = path.join(npmDir, 'node_modules', '@huggingface', 'tokenizers');

function library() {
    try {
        return require(path.join(pkgDir, 'dist', 'tokenizers.cjs'));
    } catch (e) {
        console.log(`hf_check: cannot load @huggingface/tokenizers from ${pkgDir} (bash .ci/deps.sh installs it): ${e.message}`);
        process.exit(2);
    }
}

function readIds(file, width) {
    const b = fs.readFileSync(file);
    if (b.length % width) throw new Error(`${file}: ${b.length} bytes, not a whole number of uint${8 * width} ids`);
    const ids = new Uint32Array(b.length / width);
    for (let i = 0; i < ids.length; i++) ids[i] = width === 4 ? b.readUInt32LE(4 * i) : b.readUInt16LE(2 * i);
    return ids;
}

function checkIds(dir, textFile, idsFile, label, width = '2') {
    const { Tokenizer } = library();
    const json = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
    const cfgFile = path.join(dir, 'tokenizer_config.json');
    const cfg = fs.existsSync(cfgFile) ? JSON.parse(fs.readFileSync(cfgFile, 'utf8')) : {};
    const tok = new Tokenizer(json, cfg);
    let text;
    try {
        text = new TextDecoder('utf-8', { fatal: true }).decode(fs.readFileSync(textFile));
    } catch (e) {
        console.log(`FAIL ${label}: ${textFile} is not valid UTF-8, so the JS library cannot see its bytes`);
        return 1;
    }
    const want = tok.encode(text, { add_special_tokens: false }).ids, got = readIds(idsFile, Number(width));
    const n = Math.min(want.length, got.length);
    let first = -1, differ = 0;
    for (let i = 0; i < n; i++) if (want[i] !== got[i]) { differ++; if (first < 0) first = i; }
    if (first < 0 && want.length === got.length) {
        console.log(`PASS ${label}: ${got.length} ids equal to @huggingface/tokenizers' (${path.basename(dir)})`);
        return 0;
    }
    if (first < 0) first = n;
    const show = (ids) => Array.from(ids.slice(Math.max(0, first - 3), first + 4)).join(' ');
    console.log(`FAIL ${label}: ${differ} ids differ and lengths ${got.length} (ours) vs ${want.length} (reference), ` +
                `first at index ${first}: ours [${show(got)}], reference [${show(want)}]`);
    return 1;
}

// The reference's decoding of IDS (special tokens kept, no clean-up of spaces) against TEXT, byte for byte.
function checkDecode(dir, idsFile, textFile, label, width = '2') {
    const { Tokenizer } = library();
    const json = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
    const tok = new Tokenizer(json, {});
    const ids = Array.from(readIds(idsFile, Number(width)));
    const got = Buffer.from(tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }), 'utf8');
    const want = fs.readFileSync(textFile);
    if (got.equals(want)) {
        console.log(`PASS ${label}: @huggingface/tokenizers decodes the ${ids.length} ids to the text's ${want.length} bytes`);
        return 0;
    }
    let first = 0;
    while (first < got.length && first < want.length && got[first] === want[first]) first++;
    const show = (b) => JSON.stringify(b.subarray(Math.max(0, first - 10), first + 10).toString('utf8'));
    console.log(`FAIL ${label}: decoded ${got.length} bytes vs the text's ${want.length}, first difference at byte ` +
                `${first}: decoded ${show(got)}, text ${show(want)}`);
    return 1;
}

const FILTER_MAX = 10000;

// The table's class of each code point ('L', 'N', 'S', or 'O' for none) as a function.
function tableClass(tableFile) {
    const src = fs.readFileSync(tableFile, 'utf8'), re = /\{0x([0-9a-f]+), 0x([0-9a-f]+), UNI_(\w+)\}/g;
    const ranges = [];
    for (let m; (m = re.exec(src));) ranges.push([parseInt(m[1], 16), parseInt(m[2], 16), m[3][0]]);
    return (cp) => {
        if (cp < 128) {
            if ((cp >= 9 && cp <= 13) || cp === 32) return 'S';
            if ((cp >= 65 && cp <= 90) || (cp >= 97 && cp <= 122)) return 'L';
            return cp >= 48 && cp <= 57 ? 'N' : 'O';
        }
        let lo = 0, hi = ranges.length; // the range holding cp, if any, is in [lo, hi): sorted, disjoint
        while (hi - lo > 1) {
            const mid = (lo + hi) >> 1;
            if (ranges[mid][0] <= cp) lo = mid;
            else hi = mid;
        }
        const r = ranges[lo];
        return r && r[0] <= cp && cp <= r[1] ? (r[2] === 'S' ? 'S' : r[2]) : 'O';
    };
}

function jsClass(ch) {
    if (/\s/u.test(ch)) return 'S';
    if (/\p{L}/u.test(ch)) return 'L';
    return /\p{N}/u.test(ch) ? 'N' : 'O';
}

function filter(tableFile, textFile, outFile) {
    const ours = tableClass(tableFile), differ = new Set();
    for (let cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xd800 && cp <= 0xdfff) continue;
        if (ours(cp) !== jsClass(String.fromCodePoint(cp))) differ.add(cp);
    }
    const text = new TextDecoder('utf-8', { fatal: true }).decode(fs.readFileSync(textFile));
    let kept = '', removed = 0;
    for (const ch of text) {
        if (differ.has(ch.codePointAt(0))) removed++;
        else kept += ch;
    }
    fs.writeFileSync(outFile, kept);
    const what = `filter ${path.basename(textFile)}: ${differ.size} code points classed otherwise by node ` +
                 `(Unicode ${process.versions.unicode}), ${removed} of its characters removed`;
    console.log(differ.size <= FILTER_MAX ? `PASS ${what}` : `FAIL ${what}: more than ${FILTER_MAX}`);
    return differ.size <= FILTER_MAX ? 0 : 1;
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'ids' && (args.length === 4 || (args.length === 5 && (args[4] === '2' || args[4] === '4'))))
    process.exit(checkIds(...args));
if (mode === 'decode' && (args.length === 4 || (args.length === 5 && (args[4] === '2' || args[4] === '4'))))
    process.exit(checkDecode(...args));
if (mode === 'filter' && args.length === 3) process.exit(filter(...args));
console.log('usage: node hf_check.cjs ids DIR TEXT IDS LABEL [2|4] | decode DIR IDS TEXT LABEL [2|4] | filter TABLE TEXT OUT');
process.exit(2);
