// The C face of SentencePiece (contract in sp_shim.h). C++ stays in this file: exceptions (only
// std::bad_alloc can reach here; SentencePiece reports through util::Status) are caught at each
// extern "C" function, since a C caller cannot unwind them.
#include "sp_shim.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

struct sp_shim {
    sentencepiece::SentencePieceProcessor proc;
};

namespace {

int fail(char *err, size_t n_err, const std::string &why)
{
    std::snprintf(err, n_err, "%s", why.c_str());
    return -1;
}

// The lines of a text in memory, as SentencePiece's trainer reads sentences (one per line, without
// the newline): no temporary file for the text, which prep has read already.
class LineIterator : public sentencepiece::SentenceIterator {
  public:
    LineIterator(const char *text, size_t n) : text_(text), n_(n) { Next(); }
    bool done() const override { return done_; }
    void Next() override
    {
        if (at_ >= n_) {
            done_ = true;
            return;
        }
        const void *nl = std::memchr(text_ + at_, '\n', n_ - at_);
        const size_t end = nl ? (size_t)((const char *)nl - text_) : n_;
        line_.assign(text_ + at_, end - at_);
        at_ = end + 1;
    }
    const std::string &value() const override { return line_; }
    sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

  private:
    const char *text_;
    size_t n_, at_ = 0;
    bool done_ = false;
    std::string line_;
};

} // namespace

extern "C" int sp_shim_available(void) { return 1; }

extern "C" int sp_shim_train(const char *text, size_t n, int vocab, const char *model_type, char **model_p,
                             size_t *n_model_p, char *err, size_t n_err)
{
    try {
        // identity normalization, spaces kept as they are and byte_fallback: decoding gives the text
        // back byte for byte (NFKC, the default, would change it). One thread and a fixed seed: the
        // same text gives the same model bytes. minloglevel 2: the trainer's progress is noise in prep.
        const std::unordered_map<std::string, std::string> args = {
            {"model_type", model_type},          {"vocab_size", std::to_string(vocab)},
            {"num_threads", "1"},                {"normalization_rule_name", "identity"},
            {"add_dummy_prefix", "false"},       {"remove_extra_whitespaces", "false"},
            {"byte_fallback", "true"},           {"minloglevel", "2"}};
        sentencepiece::SetRandomGeneratorSeed(1);
        LineIterator lines(text, n);
        std::string model;
        const auto st = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
        if (!st.ok()) return fail(err, n_err, "SentencePiece's training: " + st.ToString());
        char *out = static_cast<char *>(std::malloc(model.size()));
        if (!out) return fail(err, n_err, "no memory for the trained model");
        std::memcpy(out, model.data(), model.size());
        *model_p = out;
        *n_model_p = model.size();
        return 0;
    } catch (const std::bad_alloc &) {
        return fail(err, n_err, "no memory to train the SentencePiece model");
    }
}

extern "C" int sp_shim_load(const char *model, size_t n, sp_shim_t **sp_p, char *err, size_t n_err)
{
    try {
        sp_shim_t *sp = new sp_shim_t;
        const auto st = sp->proc.LoadFromSerializedProto(std::string(model, n));
        if (!st.ok()) {
            delete sp;
            return fail(err, n_err, "not a SentencePiece model: " + st.ToString());
        }
        *sp_p = sp;
        return 0;
    } catch (const std::bad_alloc &) {
        return fail(err, n_err, "no memory to load the SentencePiece model");
    }
}

extern "C" void sp_shim_free(sp_shim_t *sp) { delete sp; }

extern "C" int sp_shim_size(const sp_shim_t *sp) { return sp->proc.GetPieceSize(); }

extern "C" int sp_shim_piece(const sp_shim_t *sp, int id, char *buf, size_t n_buf, size_t *len_p, char *err,
                             size_t n_err)
{
    if (id < 0 || id >= sp->proc.GetPieceSize()) return fail(err, n_err, "piece id out of range");
    size_t len = 0;
    if (sp->proc.IsByte(id)) {
        // byte pieces are spelled <0xNN>
        unsigned v;
        if (std::sscanf(sp->proc.IdToPiece(id).c_str(), "<0x%2X>", &v) != 1 || n_buf < 1)
            return fail(err, n_err, "byte piece '" + sp->proc.IdToPiece(id) + "' not of the form <0xNN>");
        buf[len++] = (char)v;
    } else if (!sp->proc.IsControl(id) && !sp->proc.IsUnknown(id)) {
        static const char mark[] = "\xe2\x96\x81"; // U+2581, SentencePiece's space
        const std::string &p = sp->proc.IdToPiece(id);
        for (size_t i = 0; i < p.size(); len++) {
            if (len >= n_buf) return fail(err, n_err, "piece longer than the buffer");
            const bool space = !p.compare(i, 3, mark);
            buf[len] = space ? ' ' : p[i];
            i += space ? 3 : 1;
        }
    }
    *len_p = len;
    return 0;
}

extern "C" int sp_shim_encode(const sp_shim_t *sp, const char *text, size_t n, int *ids, size_t cap,
                              size_t *n_ids_p, char *err, size_t n_err)
{
    try {
        std::vector<int> out;
        const auto st = sp->proc.Encode(std::string(text, n), &out);
        if (!st.ok()) return fail(err, n_err, "SentencePiece's encoding: " + st.ToString());
        if (out.size() > cap) return fail(err, n_err, "more ids than bytes");
        std::copy(out.begin(), out.end(), ids);
        *n_ids_p = out.size();
        return 0;
    } catch (const std::bad_alloc &) {
        return fail(err, n_err, "no memory to encode");
    }
}
