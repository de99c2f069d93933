#include "tessera/exec/cpu_device.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <pthread.h>
#endif

#include "tessera/error.h"
#include "tessera/size.h"

namespace tessera {

namespace {

// An event is two counters: how many times it has been recorded (advanced on
// the host by record(), in issue order) and which record has completed
// (advanced by the recording stream's thread). A wait remembers the record
// count at the time it was issued and blocks until that record completes.
class CpuEvent final : public Event {
public:
    bool query() override {
        std::lock_guard lk(m_);
        return completed_ >= recorded_;
    }
    void synchronize() override {
        std::unique_lock lk(m_);
        uint64_t target = recorded_;
        cv_.wait(lk, [&] { return completed_ >= target; });
    }

    // Completion is a single counter, which is exact only if records complete
    // in the order they were issued, that is, all on one stream.
    uint64_t issue_record(const void *stream) {
        std::lock_guard lk(m_);
        TESSERA_INTERNAL_ASSERT(owner_ == nullptr || owner_ == stream,
                                "an event was recorded on two different streams");
        owner_ = stream;
        return ++recorded_;
    }
    uint64_t last_recorded() {
        std::lock_guard lk(m_);
        return recorded_;
    }
    void complete(uint64_t gen) {
        {
            std::lock_guard lk(m_);
            if (gen > completed_) completed_ = gen;
        }
        cv_.notify_all();
    }
    void wait_for(uint64_t gen) {
        std::unique_lock lk(m_);
        cv_.wait(lk, [&] { return completed_ >= gen; });
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    uint64_t recorded_ = 0, completed_ = 0;
    const void *owner_ = nullptr;
};

CpuEvent &as_cpu_event(Event &e) {
    auto *ce = dynamic_cast<CpuEvent *>(&e);
    TESSERA_INTERNAL_ASSERT(ce != nullptr, "an event of another device was used on a CPU stream");
    return *ce;
}

}  // namespace

// One worker thread and its queue. The queue is a ring buffer that only grows,
// so that steady-state steps allocate nothing.
class CpuStream final : public Stream {
public:
    explicit CpuStream(StreamKind kind) : kind_(kind), ring_(64) {
        worker_ = std::thread([this] { loop(); });
#if defined(__linux__)
        std::string name = std::string("tessera-") + stream_name(kind);
        pthread_setname_np(worker_.native_handle(), name.substr(0, 15).c_str());
#endif
    }

    ~CpuStream() override {
        stop();
        join();
    }

    void stop() {
        {
            std::lock_guard lk(m_);
            stopping_ = true;
        }
        work_cv_.notify_one();
    }
    void join() {
        if (worker_.joinable()) worker_.join();
    }

    StreamKind kind() const override { return kind_; }

    void enqueue(std::function<void()> work) override { push(Item{Item::Work, std::move(work), nullptr, 0}); }

    void record(Event &event) override {
        CpuEvent &e = as_cpu_event(event);
        push(Item{Item::Record, nullptr, &e, e.issue_record(this)});
    }

    void wait(Event &event) override {
        CpuEvent &e = as_cpu_event(event);
        uint64_t gen = e.last_recorded();
        if (gen == 0) return;  // never recorded: nothing to wait for (as in CUDA)
        push(Item{Item::Wait, nullptr, &e, gen});
    }

    void synchronize() override {
        std::exception_ptr error;
        {
            std::unique_lock lk(m_);
            uint64_t target = enqueued_;
            done_cv_.wait(lk, [&] { return done_ >= target; });
            std::swap(error, error_);
        }
        if (error) rethrow_stream_error(kind_, error);
    }

private:
    struct Item {
        enum Kind : uint8_t { Work, Record, Wait } kind = Work;
        std::function<void()> work;
        CpuEvent *event = nullptr;
        uint64_t gen = 0;
    };

    void push(Item item) {
        {
            std::lock_guard lk(m_);
            if (count_ == ring_.size()) grow();
            ring_[(head_ + count_) % ring_.size()] = std::move(item);
            count_++;
            enqueued_++;
        }
        work_cv_.notify_one();
    }

    void grow() {
        std::vector<Item> bigger(ring_.size() * 2);
        for (size_t i = 0; i < count_; i++) bigger[i] = std::move(ring_[(head_ + i) % ring_.size()]);
        ring_ = std::move(bigger);
        head_ = 0;
    }

    void loop() {
        for (;;) {
            Item item;
            bool failed;
            {
                std::unique_lock lk(m_);
                work_cv_.wait(lk, [&] { return count_ > 0 || stopping_; });
                if (count_ == 0) return;  // stopping, and everything queued has run
                item = std::move(ring_[head_]);
                head_ = (head_ + 1) % ring_.size();
                count_--;
                failed = error_ != nullptr;
            }
            switch (item.kind) {
            case Item::Work:
                // After a failure the stream's later work is skipped: it would
                // read what the failed work did not write.
                if (!failed) {
                    try {
                        item.work();
                    } catch (...) {
                        std::lock_guard lk(m_);
                        if (!error_) error_ = std::current_exception();
                    }
                }
                break;
            case Item::Record: item.event->complete(item.gen); break;  // even after a failure
            case Item::Wait:
                if (!failed) item.event->wait_for(item.gen);
                break;
            }
            item.work = nullptr;  // release what the work captured before reporting it done
            {
                std::lock_guard lk(m_);
                done_++;
            }
            done_cv_.notify_all();
        }
    }

    StreamKind kind_;
    std::mutex m_;
    std::condition_variable work_cv_, done_cv_;
    std::vector<Item> ring_;
    size_t head_ = 0, count_ = 0;
    uint64_t enqueued_ = 0, done_ = 0;
    bool stopping_ = false;
    std::exception_ptr error_;
    std::thread worker_;
};

CpuDevice::CpuDevice(int64_t arena_bytes) : arena_bytes_(arena_bytes) {
    TESSERA_CHECK(arena_bytes > 0, "the CPU device arena must have a positive size, got ", arena_bytes,
                  " bytes; use e.g. --device-mem 512MiB");
    void *p = ::operator new(static_cast<size_t>(arena_bytes), std::align_val_t{kAlignment}, std::nothrow);
    TESSERA_CHECK(p != nullptr, "cannot allocate the CPU device arena of ", arena_bytes, " bytes (",
                  format_bytes(arena_bytes), "): the host does not have that much memory available; use a "
                  "smaller --device-mem");
    arena_ = static_cast<std::byte *>(p);
    try {
        for (int i = 0; i < kNumStreams; i++) streams_[i] = std::make_unique<CpuStream>(static_cast<StreamKind>(i));
    } catch (...) {
        for (auto &s : streams_) s.reset();
        ::operator delete(arena_, std::align_val_t{kAlignment});
        throw;
    }
}

CpuDevice::~CpuDevice() {
    // Stop all, then join all: a stream may be waiting on another's event, and
    // the other must keep running until it has recorded it.
    for (auto &s : streams_)
        if (s) s->stop();
    for (auto &s : streams_)
        if (s) s->join();
    ::operator delete(arena_, std::align_val_t{kAlignment});
}

Stream &CpuDevice::stream(StreamKind kind) {
    auto i = static_cast<size_t>(kind);
    TESSERA_INTERNAL_ASSERT(i < streams_.size(), "stream kind ", i);
    return *streams_[i];
}

std::unique_ptr<Event> CpuDevice::create_event() { return std::make_unique<CpuEvent>(); }

void CpuDevice::do_copy_to_device(void *dst_dev, const void *src_host, size_t bytes) {
    std::memcpy(dst_dev, src_host, bytes);
}

void CpuDevice::do_copy_to_host(void *dst_host, const void *src_dev, size_t bytes) {
    std::memcpy(dst_host, src_dev, bytes);
}

}  // namespace tessera
