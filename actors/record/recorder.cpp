#include "actors/record/recorder.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "actors/record/record_codec.hpp"
#include "actors/record/record_pack.hpp"
#include "proto/private_files.hpp"

namespace kvc::record {

struct recorder::buffer {
  msgpack::sbuffer buf;
  pack::packer pk{buf};
};

recorder::recorder(std::string path, std::FILE* file)
    : path_(std::move(path)), file_(file), out_(std::make_unique<buffer>()) {}

result<std::unique_ptr<recorder>> recorder::open(const std::string& path,
                                                 const recorded_config& cfg) {
  auto fd = create_private_file(path);
  if (!fd) return make_error(fd.code(), "record: " + fd.error().message());
  std::FILE* f = ::fdopen(*fd, "wb");
  if (f == nullptr) {
    const int e = errno;
    ::close(*fd);
    return make_error(errc::io_error, "record: cannot write " + path + ": " + std::strerror(e));
  }
  std::unique_ptr<recorder> r{new recorder(path, f)};
  r->out_->buf.write(record_magic.data(), record_magic.size());
  const std::string header = encode_header(cfg);
  r->begin_frame();
  r->out_->buf.write(header.data(), header.size());
  r->end_frame();
  r->events_ = 0;
  r->write_out();  // the header is on disk even if the process dies early
  if (!r->error_) return r->error_;
  return r;
}

recorder::~recorder() { (void)close(); }

bool recorder::begin_frame() {
  if (file_ == nullptr) return false;
  frame_start_ = out_->buf.size();
  const char zero[4] = {};
  out_->buf.write(zero, sizeof zero);
  return true;
}

void recorder::end_frame() {
  const size_t len = out_->buf.size() - frame_start_ - 4;
  const auto sum = le32(seal_record_frame(out_->buf.data() + frame_start_, len));
  out_->buf.write(sum.data(), sum.size());
  ++events_;
  if (out_->buf.size() >= flush_bytes) write_out();
}

void recorder::write_out() {
  if (file_ == nullptr || out_->buf.size() == 0) return;
  if (std::fwrite(out_->buf.data(), 1, out_->buf.size(), file_) != out_->buf.size()) {
    error_ = make_error(errc::io_error, "record: writing " + path_ + ": " + std::strerror(errno));
    std::fclose(file_);
    file_ = nullptr;
  }
  out_->buf.clear();
}

status recorder::close() {
  if (file_ != nullptr) {
    write_out();
    if (file_ != nullptr && std::fclose(file_) != 0 && error_) {
      error_ = make_error(errc::io_error, "record: closing " + path_ + ": " + std::strerror(errno));
    }
    file_ = nullptr;
  }
  return error_;
}

void recorder::match(const scheduler::request_view& req, uint32_t num_computed,
                     const scheduler::match_result& answer) {
  if (!begin_frame()) return;
  pack::match(out_->pk, hashes_, req, num_computed, answer.tokens);
  end_frame();
}

void recorder::alloc(const scheduler::request_view& req, std::span<const gpu_block> block_ids,
                     uint32_t num_external, bool ok) {
  if (!begin_frame()) return;
  pack::alloc(out_->pk, hashes_, req, block_ids, false, {}, num_external, ok);
  end_frame();
}

void recorder::alloc(const scheduler::request_view& req,
                     const scheduler::block_table_view& blocks, uint32_t num_external, bool ok) {
  if (!begin_frame()) return;
  pack::alloc(out_->pk, hashes_, req, blocks.ids, true, blocks.hashed, num_external, ok);
  end_frame();
}

void recorder::build(const scheduler::step_input& in, const connector_metadata* meta) {
  if (!begin_frame()) return;
  const metadata_digest d = meta != nullptr ? digest_of(*meta) : metadata_digest{};
  pack::build(out_->pk, hashes_, in, meta != nullptr, d);
  end_frame();
}

void recorder::finished(std::string_view req_id, bool delay_free) {
  if (!begin_frame()) return;
  pack::finished(out_->pk, hashes_, req_id, delay_free);
  end_frame();
}

void recorder::request_output(const scheduler::request_output& out) {
  if (!begin_frame()) return;
  pack::request_output(out_->pk, out);
  end_frame();
}

void recorder::take_completions() {
  if (!begin_frame()) return;
  pack::take_completions(out_->pk);
  end_frame();
}

void recorder::reset(bool ok) {
  if (!begin_frame()) return;
  pack::reset(out_->pk, ok);
  end_frame();
}

void recorder::expect(step_id step, uint64_t now) {
  if (!begin_frame()) return;
  pack::expect(out_->pk, step, now);
  end_frame();
}

void recorder::report(const step_report& r) {
  if (!begin_frame()) return;
  pack::report(out_->pk, r);
  end_frame();
}

void recorder::rank_up(rank_id rank, uint32_t incarnation) {
  if (!begin_frame()) return;
  pack::rank_up(out_->pk, rank, incarnation);
  end_frame();
}

void recorder::rank_down(rank_id rank) {
  if (!begin_frame()) return;
  pack::rank_down(out_->pk, rank);
  end_frame();
}

void recorder::tick(uint64_t now) {
  if (!begin_frame()) return;
  pack::tick(out_->pk, now);
  end_frame();
}

void recorder::poll(const std::optional<connector_output>& out) {
  if (!begin_frame()) return;
  pack::poll(out_->pk, out.has_value(), out ? digest_of(*out) : output_digest{});
  end_frame();
}

}  // namespace kvc::record
