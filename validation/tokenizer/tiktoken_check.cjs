// The reference side of validation/test_tokenizer.sh: tiktoken's gpt2 encoding (npm tiktoken, the
// Rust library built to WebAssembly) against what `mindpipe prep --tokenizer gpt2` wrote.
//
//   node tiktoken_check.cjs ids TEXT IDS LABEL       tiktoken's encode_ordinary(TEXT) == IDS
//   node tiktoken_check.cjs roundtrip FILE IDS LABEL tiktoken's decode(IDS) == FILE's bytes
//   node tiktoken_check.cjs classes TABLE.c          tiktoken's \p{L}, \p{N}, \s == the table's classes
//   node tiktoken_check.cjs corpus DIR SEED          writes the fuzzed corpora (below) into DIR
//   node tiktoken_check.cjs bench TEXT               tiktoken's MB/s on TEXT (encode_ordinary, one thread; wall and CPU)
//
// IDS is a file of uint16 little-endian token ids (the data file's /train then /val). Checks print
// "PASS what" or "FAIL what" lines; the exit status is 0 when all passed, 1 when one failed, 2 on
// a usage error. The tokenizer under test is found in $MINDPIPE_NPM_DIR (default ~/.cache/mindpipe/npm),
// where .ci/deps.sh installs it.
//
// Invalid UTF-8: tiktoken's JS encode takes a JS string, and turning bytes into one replaces every
// ill-formed sequence by U+FFFD, so tiktoken never sees such bytes and has no answer for them. Our
// tokenizer keeps every byte (each one that starts no well-formed sequence is a character of class
// "other" of its own; pretok_gpt2.h). So `ids` compares only texts that are valid UTF-8 (it refuses
// any other, rather than compare with a lossy copy), and text with invalid bytes is checked by
// `roundtrip`: the ids decode, through tiktoken's own decoder, to exactly the bytes prep read.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const npmDir = process.env.MINDPIPE_NPM_DIR || path.join(os.homedir(), '.cache', 'mindpipe', 'npm');
const tiktokenDir = path.join(npmDir, 'node_modules', 'tiktoken');
let failed = 0;
const pass = (what) => console.log(`PASS ${what}`);
const fail = (what) => { console.log(`FAIL ${what}`); failed++; };

function tiktoken() {
    try {
        return require(tiktokenDir);
    } catch (e) {
        console.log(`tiktoken_check: cannot load tiktoken from ${tiktokenDir} (bash .ci/deps.sh installs it): ${e.message}`);
        process.exit(2);
    }
}

function readIds(file) {
    const b = fs.readFileSync(file);
    if (b.length % 2) throw new Error(`${file}: ${b.length} bytes, not a whole number of uint16 ids`);
    const ids = new Uint32Array(b.length / 2);
    for (let i = 0; i < ids.length; i++) ids[i] = b.readUInt16LE(2 * i);
    return ids;
}

// tiktoken's ids for TEXT against IDS: equal length and every id; the first difference is named by
// index, with both sides' tokens around it.
function checkIds(textFile, idsFile, label) {
    const enc = tiktoken().get_encoding('gpt2');
    let text;
    try {
        text = new TextDecoder('utf-8', { fatal: true }).decode(fs.readFileSync(textFile));
    } catch (e) {
        return fail(`${label}: ${textFile} is not valid UTF-8, so tiktoken cannot see its bytes (check it by roundtrip)`);
    }
    const want = enc.encode_ordinary(text), got = readIds(idsFile);
    const n = Math.min(want.length, got.length);
    let first = -1, count = Math.abs(want.length - got.length);
    for (let i = 0; i < n; i++)
        if (want[i] !== got[i]) { if (first < 0) first = i; count++; }
    if (first < 0 && want.length !== got.length) first = n;
    if (first < 0) return pass(`${label}: ${got.length} ids equal tiktoken's gpt2 (${fs.statSync(textFile).size} bytes)`);
    const show = (ids) => JSON.stringify(Array.from(ids.slice(Math.max(0, first - 3), first + 4)));
    const bytes = (id) => id === undefined ? 'none' : JSON.stringify(Buffer.from(enc.decode_single_token_bytes(id)).toString('latin1'));
    fail(`${label}: ${count} ids differ from tiktoken's gpt2 (${got.length} ids, tiktoken ${want.length}); first at index ` +
         `${first}: ours ${got[first]} ${bytes(got[first])}, tiktoken's ${want[first]} ${bytes(want[first])}; ` +
         `ours ${show(got)} tiktoken ${show(want)} from index ${Math.max(0, first - 3)}`);
}

function checkRoundtrip(file, idsFile, label) {
    const enc = tiktoken().get_encoding('gpt2');
    const want = fs.readFileSync(file), got = Buffer.from(enc.decode(readIds(idsFile)));
    if (want.equals(got)) return pass(`${label}: tiktoken decodes the ${readIds(idsFile).length} ids to the ${want.length} bytes of ${path.basename(file)}`);
    let i = 0;
    while (i < want.length && i < got.length && want[i] === got[i]) i++;
    fail(`${label}: the ids decode to ${got.length} bytes, not ${path.basename(file)}'s ${want.length}: first difference at byte ${i}`);
}

// Which code points the reference's regex engine puts in each class: a Tiktoken built with one-byte
// tokens only and the pattern \p{L} (or \p{N}, \s) returns the bytes of exactly the characters the
// pattern matches (tiktoken skips what no match covers), so decoding them gives the class.
function engineClass(lite, pattern, all) {
    let ranks = '! 0';
    for (let b = 0; b < 256; b++) ranks += ' ' + Buffer.from([b]).toString('base64');
    const enc = new lite.Tiktoken(ranks, {}, pattern);
    const set = new Set();
    for (const ch of Buffer.from(enc.encode_ordinary(all)).toString('utf8')) set.add(ch.codePointAt(0));
    enc.free();
    return set;
}

function checkClasses(tableFile) {
    const lite = require(path.join(tiktokenDir, 'lite', 'tiktoken.cjs'));
    let all = '';
    for (let cp = 0; cp <= 0x10ffff; cp++) if (cp < 0xd800 || cp > 0xdfff) all += String.fromCodePoint(cp);
    const table = { UNI_LETTER: new Set(), UNI_NUMBER: new Set(), UNI_SPACE: new Set() };
    const re = /\{(0x[0-9a-f]+), (0x[0-9a-f]+), (UNI_[A-Z]+)\}/g;
    let m, ranges = 0;
    for (const src = fs.readFileSync(tableFile, 'utf8'); (m = re.exec(src)); ranges++)
        for (let cp = parseInt(m[1], 16); cp <= parseInt(m[2], 16); cp++) table[m[3]].add(cp);
    if (!ranges) return fail(`classes: no ranges in ${tableFile}`);
    for (const [name, pattern] of [['UNI_LETTER', '\\p{L}'], ['UNI_NUMBER', '\\p{N}'], ['UNI_SPACE', '\\s']]) {
        const want = engineClass(lite, pattern, all), got = table[name];
        const missing = [...want].filter((cp) => !got.has(cp)), extra = [...got].filter((cp) => !want.has(cp));
        const hex = (l) => l.slice(0, 5).map((cp) => 'U+' + cp.toString(16).toUpperCase()).join(' ');
        if (!missing.length && !extra.length) pass(`classes: ${name} is tiktoken's ${pattern} (${want.size} code points)`);
        else fail(`classes: ${name} differs from tiktoken's ${pattern}: ${missing.length} missing (${hex(missing)}), ` +
                  `${extra.length} extra (${hex(extra)})`);
    }
}

// ---- the fuzzed corpora ----

// A small counter-free generator (mulberry32): the same corpora from the same seed on any machine.
function rng(seed) {
    let a = seed >>> 0;
    return () => {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

// Writes into dir:
//   bytes.bin    random byte strings (mostly ill-formed UTF-8: checked by roundtrip);
//   bytes.txt    the same bytes made valid (each ill-formed sequence U+FFFD, as a JS string has it);
//   mix.txt      random mixes of code points: ASCII words, digits, contractions of any case, runs of
//                every kind of white space, punctuation, combining marks, emoji with ZWJ and skin
//                tones, CJK, Arabic and Hebrew, astral letters, and uniform draws over all of Unicode;
//   every.txt    every Unicode scalar value once, shuffled, each between random neighbours (a letter,
//                a digit, a space, an apostrophe, another character), so each meets each class.
function writeCorpus(dir, seed) {
    const r = rng(seed);
    const pick = (a) => a[Math.floor(r() * a.length)];
    const int = (lo, hi) => lo + Math.floor(r() * (hi - lo + 1));
    fs.mkdirSync(dir, { recursive: true });

    const raw = Buffer.alloc(1 << 20);
    for (let i = 0; i < raw.length;) { /* stretches of one flavour: any byte, ASCII, high bytes */
        const len = int(1, 64), flavour = int(0, 2);
        for (let k = 0; k < len && i < raw.length; k++, i++)
            raw[i] = flavour === 0 ? int(0, 255) : flavour === 1 ? int(0, 127) : int(0x80, 0xff);
    }
    fs.writeFileSync(path.join(dir, 'bytes.bin'), raw);
    fs.writeFileSync(path.join(dir, 'bytes.txt'), Buffer.from(raw.toString('utf8'), 'utf8'));

    const spaces = [' ', '\t', '\n', '\r', '\r\n', '\v', '\f', '\u0085', '\u00a0', '\u1680', '\u2000', '\u2007',
                    '\u200a', '\u2028', '\u2029', '\u202f', '\u205f', '\u3000', '\u200b', '\ufeff', '\u180e'];
    const words = ['the', 'The', 'THE', 'and', 'of', 'Lord', 'said', 'unto', 'naïve', 'café', 'Straße', 'Ωμέγα',
                   'мир', 'Привет', 'עולם', 'مرحبا', 'नमस्ते', 'ภาษาไทย', '中文', '日本語', '한국어', 'ｆｕｌｌ'];
    const pieces = [
        () => pick(words),
        () => String(int(0, 1e9)),
        () => pick(['٣٤٥', '१२३', '½', '²³', 'Ⅻ', '１２３', '𝟘𝟙', '⑦']),
        () => "'" + pick(['s', 't', 're', 've', 'm', 'll', 'd', 'S', 'T', 'RE', 'Ve', 'M', 'LL', 'D', 'x', '', "'", ' s']),
        () => pick(spaces).repeat(int(1, 6)),
        () => ' '.repeat(int(1, 40)),
        () => pick(['!', '?', '.', ',', ';', ':', '...', '--', '"', '(', ')', '[', ']', '{', '}', '<|endoftext|>', '#', '@', '`', '\\', '\u0000']).repeat(int(1, 3)),
        () => pick(['e', 'a', 'o', 'i']) + String.fromCodePoint(int(0x300, 0x36f)).repeat(int(1, 4)),
        () => String.fromCodePoint(int(0x300, 0x36f)),
        () => pick(['👍', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇺🇳', '❤️', '1️⃣', '🧑🏿‍🚀', '😀😃😄']),
        () => String.fromCodePoint(int(0x4e00, 0x9fff)).repeat(int(1, 3)),
        () => String.fromCodePoint(int(0x600, 0x6ff), int(0x5d0, 0x5ea)),
        () => String.fromCodePoint(int(0x10000, 0x1ffff)),
        () => String.fromCodePoint(int(0x80, 0xffff)),
        () => { let cp; do cp = int(0, 0x10ffff); while (cp >= 0xd800 && cp <= 0xdfff); return String.fromCodePoint(cp); },
        () => pick(['a', '1', ' ', '!', '中']).repeat(int(60, 300)), /* long pieces: the heap's merges */
    ];
    let mix = '';
    while (mix.length < 1 << 20) mix += pieces[int(0, pieces.length - 1)]();
    fs.writeFileSync(path.join(dir, 'mix.txt'), mix, 'utf8');

    const cps = [];
    for (let cp = 0; cp <= 0x10ffff; cp++) if (cp < 0xd800 || cp > 0xdfff) cps.push(cp);
    for (let i = cps.length - 1; i > 0; i--) { const j = int(0, i); [cps[i], cps[j]] = [cps[j], cps[i]]; }
    const around = ['a', 'Z', '7', ' ', "'", '\n', '!', '', ''];
    const parts = [];
    for (const cp of cps) parts.push(pick(around), String.fromCodePoint(cp));
    fs.writeFileSync(path.join(dir, 'every.txt'), parts.join(''), 'utf8');
    pass(`corpus: bytes.bin, bytes.txt, mix.txt, every.txt written to ${dir} (seed ${seed})`);
}

function bench(textFile) {
    const enc = tiktoken().get_encoding('gpt2');
    const bytes = fs.readFileSync(textFile);
    const t0 = process.hrtime.bigint(), c0 = process.cpuUsage();
    const text = bytes.toString('utf8');
    const ids = enc.encode_ordinary(text);
    const c1 = process.cpuUsage(c0), s = Number(process.hrtime.bigint() - t0) / 1e9, cpu = (c1.user + c1.system) / 1e6;
    console.log(`tiktoken ${bytes.length} bytes ${ids.length} ids wall ${s.toFixed(3)} s ${(bytes.length / 1e6 / s).toFixed(2)} MB/s ` +
                `cpu ${cpu.toFixed(3)} s ${(bytes.length / 1e6 / cpu).toFixed(2)} MB/s`);
}

const [mode, ...args] = process.argv.slice(2);
const usage = { ids: 3, roundtrip: 3, classes: 1, corpus: 2, bench: 1 };
if (!(mode in usage) || args.length !== usage[mode]) {
    console.log('usage: tiktoken_check.cjs ids TEXT IDS LABEL | roundtrip FILE IDS LABEL | classes TABLE.c | corpus DIR SEED | bench TEXT');
    process.exit(2);
}
if (mode === 'ids') checkIds(...args);
else if (mode === 'roundtrip') checkRoundtrip(...args);
else if (mode === 'classes') checkClasses(...args);
else if (mode === 'corpus') writeCorpus(args[0], Number(args[1]));
else bench(args[0]);
process.exit(failed ? 1 : 0);
