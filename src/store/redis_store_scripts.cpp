// SPDX-License-Identifier: Apache-2.0
// How the Redis store names a script in a call and loads it: FCALL of the Redis Function while
// Redis has Functions and takes them, EVALSHA otherwise, EVAL after a NOSCRIPT (see the class's
// header); and the calls of the scripts besides the batches' (`run_script`), sent again under
// the next name when Redis refuses one.
#include "sluice/core/log_excerpt.hpp"
#include "sluice/core/log_throttle.hpp"
#include "sluice/redis/command_writer.hpp"
#include "sluice/redis/scripts.hpp"
#include "sluice/store/redis_store.hpp"

#include <spdlog/spdlog.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::store {

redis::script_call redis_store::first_call(const redis::script& script) noexcept {
    // Read the clock only while Functions are given up: the usual call pays one branch.
    if (!use_functions_ && std::chrono::steady_clock::now() >= functions_retry_at_) {
        use_functions_ = true;
    }
    return use_functions_ && !script.function_name.empty() ? redis::script_call::fcall
                                                           : redis::script_call::evalsha;
}

std::optional<redis::script_call>
redis_store::retry_as(std::uint16_t slot, redis::script_call how, const redis::reply& r) {
    switch (redis::refusal_of(how, r)) {
    case redis::script_refusal::none:
        return std::nullopt;
    case redis::script_refusal::function_missing:
        load_functions(slot);
        return redis::script_call::evalsha;
    case redis::script_refusal::functions_unusable:
        give_up_functions(r.str);
        return redis::script_call::evalsha;
    case redis::script_refusal::noscript:
        break;
    }
    return redis::script_call::eval;
}

void redis_store::load_functions(std::uint16_t slot) {
    if (function_load_pending_ || !use_functions_) {
        return;
    }
    function_load_pending_ = true;
    std::string command;
    redis::command_writer w(command, 3);
    w.arg("FUNCTION");
    w.arg("LOAD");
    w.arg(redis::limits_script.library);
    call(slot, command, [alive = std::weak_ptr(self_)](error_code ec, redis::reply r) {
        const auto self = alive.lock();
        if (!self) {
            return;
        }
        auto& owner = **self;
        owner.function_load_pending_ = false;
        // Another worker or instance of this version loaded it first: as good as loading it.
        if (ec == errc::bad_reply && r.str.find("already exists") != std::string::npos) {
            return;
        }
        if (ec == errc::bad_reply) {
            // Refused (an ACL, out of memory, ...): EVALSHA from now on, at the cost of the
            // script's prelude per call, rather than a refused FCALL and a retry per call.
            owner.give_up_functions(r.str);
        }
        // Otherwise loaded, or no answer (the connection went): the next FCALL finds out.
    });
}

void redis_store::give_up_functions(std::string_view why) {
    if (!use_functions_) {
        return;
    }
    use_functions_ = false;
    functions_retry_at_ = std::chrono::steady_clock::now() + functions_retry_after_;
    // From Redis (not from a client), once a minute per worker at most. The first time says it
    // at info; a Redis that keeps refusing (before 7, say) says it again only at debug.
    static keyed_log_throttle gave_up{std::chrono::seconds(10)};
    log_throttled(gave_up,
                  ++functions_given_up_ == 1 ? spdlog::level::info : spdlog::level::debug,
                  "redis store: Redis Functions unusable ({}): deciding with EVALSHA, trying "
                  "them again in {} s",
                  log_excerpt(why),
                  std::chrono::ceil<std::chrono::seconds>(functions_retry_after_).count());
}

void redis_store::run_script(std::uint16_t slot,
                             const redis::script& script,
                             std::vector<std::string> args,
                             const char* what,
                             const char* otherwise,
                             std::function<void(error_code)> on_failure) {
    run_script(slot,
               script,
               first_call(script),
               std::move(args),
               what,
               otherwise,
               std::move(on_failure),
               exit_hold_);
}

void redis_store::run_script(std::uint16_t slot,
                             const redis::script& script,
                             redis::script_call how,
                             std::vector<std::string> args,
                             const char* what,
                             const char* otherwise,
                             std::function<void(error_code)> on_failure,
                             std::shared_ptr<void> hold) {
    std::string command;
    redis::command_writer w(command, 2 + args.size());
    const auto [verb, name] = redis::script_call_head(how, script);
    w.arg(verb);
    w.arg(name);
    for (const auto& a : args) {
        w.arg(std::string_view(a));
    }
    call(slot,
         command,
         [alive = std::weak_ptr(self_),
          slot,
          s = &script,
          how,
          args,
          what,
          otherwise,
          on_failure = std::move(on_failure),
          hold = std::move(hold)](error_code ec, redis::reply r) mutable {
             const auto self = alive.lock();
             if (!self || !ec) {
                 return;
             }
             if (const auto next = (*self)->retry_as(slot, how, r)) {
                 // Redis does not know the script by this name: the same call, named the next
                 // way.
                 (*self)->run_script(slot,
                                     *s,
                                     *next,
                                     std::move(args),
                                     what,
                                     otherwise,
                                     std::move(on_failure),
                                     std::move(hold));
                 return;
             }
             // Per script and kind of failure (an error reply's kind, as in answer()): a key per
             // text would let each new text through.
             static keyed_log_throttle failures{std::chrono::seconds(10)};
             const auto kind = ec == errc::bad_reply ? r.error_kind() : "unanswered";
             log_throttled_by(failures,
                              std::string(what) + ": " + std::string(kind),
                              spdlog::level::warn,
                              "redis store: could not {} ({}): {}",
                              what,
                              ec == errc::bad_reply ? log_excerpt(r.str) : ec.message(),
                              otherwise);
             if (on_failure) {
                 on_failure(ec);
             }
         });
}

} // namespace sluice::store
