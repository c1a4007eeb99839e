// Parsing and serializing requests and replies as bytes, and the interceptor
// that names an unparsable unary request (parse.h).
#include "parse.h"

#include <cassert>
#include <cstring>
#include <limits>

#include <google/protobuf/arena.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <grpc/slice.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include "convert.h"
#include "tpool/rpc/services.h"

namespace tpool::rpc {
namespace {
// ResultBatch.results: field 1, wire type 2 (length-delimited).
constexpr std::uint8_t kResultsFieldTag = (1 << 3) | 2;
}  // namespace

bool parse_bytes(grpc::ByteBuffer& bytes, google::protobuf::MessageLite& out) {
  out.Clear();
  return grpc::GenericDeserialize<grpc::ProtoBufferReader, google::protobuf::MessageLite>(&bytes,
                                                                                          &out)
      .ok();
}

grpc::Status unparsable_request(const std::string& type_name) {
  return to_status(Refusal::kUnparsable,
                   "the request could not be parsed as " + type_name +
                       "; its bytes are not a valid protobuf message of that type: check that "
                       "the client was generated from tpool/v1 and sends the message the "
                       "method takes");
}

std::uint64_t batch_entry_bytes(const tpool::v1::JobResult& r) {
  return r.ByteSizeLong() + 6;  // 1 tag byte + a length varint of at most 5 bytes
}

std::string batch_entry(const tpool::v1::JobResult& r) {
  using google::protobuf::io::CodedOutputStream;
  // A result fits in a reply (fit_result), so far below 4 GiB.
  const auto size = static_cast<std::uint32_t>(r.ByteSizeLong());
  std::string entry(1 + CodedOutputStream::VarintSize32(size) + size, '\0');
  auto* p = reinterpret_cast<std::uint8_t*>(entry.data());
  *p++ = kResultsFieldTag;
  p = CodedOutputStream::WriteVarint32ToArray(size, p);
  r.SerializeWithCachedSizesToArray(p);  // the sizes ByteSizeLong just cached
  return entry;
}

RequestFields request_fields(const tpool::v1::JobRequest& r) {
  RequestFields f;
  f.handler = r.handler();
  f.payload = r.payload();
  f.idempotency_key = r.idempotency_key();
  f.labels = r.labels().empty() ? nullptr : &r.labels();
  f.lane = r.lane();
  f.timeout_ms = r.timeout_ms();
  f.tag = r.tag();
  f.max_attempts = r.max_attempts();
  f.backoff_base_ms = r.backoff_base_ms();
  f.backoff_cap_ms = r.backoff_cap_ms();
  f.delay_ms = r.delay_ms();
  f.not_before_unix_ms = r.not_before_unix_ms();
  f.durable = r.durable();
  return f;
}

namespace {

// JobBatch.jobs: field 1, wire type 2.
constexpr std::uint8_t kJobsFieldTag = (1 << 3) | 2;

// A varint as protobuf reads one (overlong forms included), of at most 64
// bits: false when it is cut short or longer than ten bytes, or its tenth
// byte holds more than the 64th bit (protobuf's own answer to those is left
// to protobuf).
bool read_varint(const std::uint8_t*& p, const std::uint8_t* end, std::uint64_t& v) {
  std::uint64_t r = 0;
  for (int i = 0; i < 10 && p != end; ++i) {
    const std::uint8_t b = *p++;
    if (i == 9 && b > 1) return false;
    r |= static_cast<std::uint64_t>(b & 0x7f) << (7 * i);
    if (b < 0x80) {
      v = r;
      return true;
    }
  }
  return false;
}

bool is_ascii(std::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// One JobRequest in [p, end) in parse_plain_batch's plain form; false for
// anything else (the caller then leaves the message to protobuf).
bool parse_plain_request(const std::uint8_t* p, const std::uint8_t* end, RequestFields& f) {
  std::uint32_t seen = 0;  // a field twice (protobuf: the last wins) is left to protobuf
  while (p != end) {
    const std::uint8_t tag = *p++;
    if (tag >= 0x80) return false;  // a tag past one byte: no field of JobRequest
    const int field = tag >> 3;
    const int wire = tag & 7;
    if (field < 1 || field > 13 || field == 6) return false;  // 6: labels, a map
    if ((seen & (1u << field)) != 0) return false;
    seen |= 1u << field;
    const bool length_delimited = field == 1 || field == 2 || field == 5;
    if (wire != (length_delimited ? 2 : 0)) return false;
    std::uint64_t v = 0;
    if (!read_varint(p, end, v)) return false;
    if (length_delimited) {
      if (v > static_cast<std::uint64_t>(end - p)) return false;
      const std::string_view s(reinterpret_cast<const char*>(p), static_cast<std::size_t>(v));
      p += v;
      if (field == 2) {
        f.payload = s;  // bytes: any
      } else if (!is_ascii(s)) {
        return false;  // a string field: protobuf checks its UTF-8
      } else {
        (field == 1 ? f.handler : f.idempotency_key) = s;
      }
      continue;
    }
    constexpr std::uint64_t kU32 = std::numeric_limits<std::uint32_t>::max();
    switch (field) {
      case 3:  // an int32 enum: a negative value is ten bytes, left to protobuf
        if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) return false;
        f.lane = static_cast<std::int32_t>(v);
        break;
      case 4:
        f.timeout_ms = v;
        break;
      case 7:
        f.tag = v;
        break;
      case 8:
      case 9:
      case 10: {
        if (v > kU32) return false;  // protobuf keeps the low 32 bits: left to it
        const auto u = static_cast<std::uint32_t>(v);
        (field == 8 ? f.max_attempts : field == 9 ? f.backoff_base_ms : f.backoff_cap_ms) = u;
        break;
      }
      case 11:
        f.delay_ms = v;
        break;
      case 12:
        f.not_before_unix_ms = v;
        break;
      default:  // 13, durable: a bool
        if (v > 1) return false;
        f.durable = v == 1;
        break;
    }
  }
  return true;
}

}  // namespace

bool parse_plain_batch(std::string_view bytes, std::vector<RequestFields>& out) {
  const std::size_t before = out.size();
  const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data());
  const auto* const end = p + bytes.size();
  while (p != end) {
    std::uint64_t size = 0;
    if (*p++ != kJobsFieldTag || !read_varint(p, end, size) ||
        size > static_cast<std::uint64_t>(end - p) ||
        !parse_plain_request(p, p + size, out.emplace_back())) {
      out.resize(before);
      return false;
    }
    p += size;
  }
  return true;
}

bool read_job_batch(const grpc::ByteBuffer& in, std::string& bytes, google::protobuf::Arena& arena,
                    std::vector<RequestFields>& items) {
  std::vector<grpc::Slice> slices;
  if (!in.Dump(&slices).ok()) return false;
  std::size_t total = 0;
  for (const grpc::Slice& sl : slices) total += sl.size();
  bytes.clear();
  bytes.reserve(total);
  for (const grpc::Slice& sl : slices) {
    bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  if (parse_plain_batch(bytes, items)) return true;
  auto* batch = google::protobuf::Arena::CreateMessage<tpool::v1::JobBatch>(&arena);
  if (!batch->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return false;
  items.reserve(items.size() + static_cast<std::size_t>(batch->jobs_size()));
  for (const tpool::v1::JobRequest& r : batch->jobs()) items.push_back(request_fields(r));
  return true;
}

namespace {

using google::protobuf::io::CodedOutputStream;

// JobResult's fields on the wire (jobs.proto): every tag fits one byte.
enum : std::uint8_t {
  kVarint = 0,
  kLengthDelimited = 2,
};
constexpr std::uint8_t tag_of(int field, std::uint8_t wire) {
  return static_cast<std::uint8_t>((field << 3) | wire);
}

// An int32 or enum value as protobuf writes it: a negative one sign-extended
// to ten bytes.
constexpr std::uint64_t as_varint(std::int32_t v) {
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
}

std::size_t varint_field(std::uint64_t v) {  // proto3: zero is omitted
  return v == 0 ? 0 : 1 + CodedOutputStream::VarintSize64(v);
}
std::size_t bytes_field(std::string_view s) {  // ... and so is an empty string
  return s.empty()
             ? 0
             : 1 + CodedOutputStream::VarintSize32(static_cast<std::uint32_t>(s.size())) + s.size();
}

std::size_t result_bytes(const ResultFields& f) {
  return varint_field(f.job_id) + varint_field(as_varint(f.state)) + bytes_field(f.output) +
         bytes_field(f.message) + varint_field(f.tag) + varint_field(as_varint(f.code)) +
         varint_field(f.wait_us) + varint_field(f.run_us) + bytes_field(f.replica) +
         varint_field(f.attempts);
}

std::uint8_t* put_varint(std::uint8_t* p, int field, std::uint64_t v) {
  if (v == 0) return p;
  *p++ = tag_of(field, kVarint);
  return CodedOutputStream::WriteVarint64ToArray(v, p);
}
std::uint8_t* put_bytes(std::uint8_t* p, int field, std::string_view s) {
  if (s.empty()) return p;
  *p++ = tag_of(field, kLengthDelimited);
  p = CodedOutputStream::WriteVarint32ToArray(static_cast<std::uint32_t>(s.size()), p);
  std::memcpy(p, s.data(), s.size());
  return p + s.size();
}

std::string too_large_sentence(std::uint64_t size, std::uint64_t max_bytes) {
  return "the job's result is " + std::to_string(size) +
         " bytes, more than one reply may hold (server.max_message_bytes = " +
         std::to_string(max_bytes) +
         "); its output was dropped: make the output smaller, or raise "
         "server.max_message_bytes (and keep server.max_output_bytes 16 KiB below it)";
}

}  // namespace

std::string batch_entry(ResultFields f, std::uint64_t max_bytes) {
  std::size_t size = result_bytes(f);
  std::string sentence;
  if (size + 6 > max_bytes) {  // fit_result's test: batch_entry_bytes is the size + 6
    sentence = too_large_sentence(size + 6, max_bytes);
    f.output = {};
    f.state = tpool::v1::JOB_STATE_FAILED;
    f.message = sentence;
    size = result_bytes(f);
  }
  const auto size32 = static_cast<std::uint32_t>(size);  // below max_bytes, so far below 4 GiB
  std::string entry(1 + CodedOutputStream::VarintSize32(size32) + size, '\0');
  auto* p = reinterpret_cast<std::uint8_t*>(entry.data());
  *p++ = kResultsFieldTag;
  p = CodedOutputStream::WriteVarint32ToArray(size32, p);
  // In field-number order, as protobuf serializes.
  p = put_varint(p, 1, f.job_id);
  p = put_varint(p, 2, as_varint(f.state));
  p = put_bytes(p, 3, f.output);
  p = put_bytes(p, 4, f.message);
  p = put_varint(p, 5, f.tag);
  p = put_varint(p, 6, as_varint(f.code));
  p = put_varint(p, 7, f.wait_us);
  p = put_varint(p, 8, f.run_us);
  p = put_bytes(p, 9, f.replica);
  p = put_varint(p, 10, f.attempts);
  assert(p == reinterpret_cast<std::uint8_t*>(entry.data()) + entry.size());
  return entry;
}

void retag_entry(std::string& entry, std::uint64_t tag) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const std::uint8_t*>(entry.data()),
                                            static_cast<int>(entry.size()));
  std::uint32_t size = 0;
  tpool::v1::JobResult r;
  // Always an entry batch_entry made: these cannot fail but are checked.
  if (in.ReadTag() != kResultsFieldTag || !in.ReadVarint32(&size)) return;
  const auto limit = in.PushLimit(static_cast<int>(size));
  if (!r.ParseFromCodedStream(&in)) return;
  in.PopLimit(limit);
  r.set_tag(tag);
  entry = batch_entry(r);
}

void join_entries(std::span<const std::string> entries, grpc::ByteBuffer& out) {
  std::size_t total = 0;
  for (const std::string& e : entries) total += e.size();
  grpc_slice raw = grpc_slice_malloc(total);
  std::uint8_t* p = GRPC_SLICE_START_PTR(raw);
  for (const std::string& e : entries) {
    std::memcpy(p, e.data(), e.size());
    p += e.size();
  }
  grpc::Slice slice(raw, grpc::Slice::STEAL_REF);
  out = grpc::ByteBuffer(&slice, 1);
}

bool fit_result(tpool::v1::JobResult& r, std::uint64_t max_bytes) {
  const std::uint64_t size = batch_entry_bytes(r);
  if (size <= max_bytes) return false;
  r.clear_output();
  r.set_state(tpool::v1::JOB_STATE_FAILED);
  r.set_message(too_large_sentence(size, max_bytes));
  return true;
}

namespace {

// The full name of a method's request type, from its path
// "/tpool.v1.JobService/Execute"; empty if the method is not in the
// generated descriptor pool.
std::string request_type_of(const char* path) {
  std::string name(path != nullptr ? path : "");
  if (!name.empty() && name.front() == '/') name.erase(0, 1);
  if (auto slash = name.find('/'); slash != std::string::npos) name[slash] = '.';
  const auto* m = google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(name);
  return m != nullptr ? m->input_type()->full_name() : std::string();
}

class UnparsableRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit UnparsableRequestInterceptor(const char* method) : method_(method) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    using grpc::experimental::InterceptionHookPoints;
    // A unary call's request is deserialized before this hook; a null
    // message here means it did not parse.
    if (m->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        m->GetRecvMessage() == nullptr) {
      unparsable_ = true;
    }
    if (unparsable_ && m->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      std::string type = request_type_of(method_);
      m->ModifySendStatus(unparsable_request(type.empty() ? "the method's request type" : type));
    }
    m->Proceed();
  }

 private:
  const char* method_;       // gRPC's, valid for the call
  bool unparsable_ = false;  // the call's hooks run one at a time
};

}  // namespace

grpc::experimental::Interceptor* UnparsableRequestInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) return nullptr;
  return new UnparsableRequestInterceptor(info->method());
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
unparsable_request_interceptors() {
  return std::make_unique<UnparsableRequestInterceptorFactory>();
}

}  // namespace tpool::rpc
