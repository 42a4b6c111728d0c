// Reservations: a cost taken before the work (an estimate: a completion's max_tokens), settled to
// what the work turned out to cost once it ends (POST /v1/reserve and /v1/settle; the reverse
// proxy's `cost:`). What was taken is kept as an engine::Refundable, and travels between the
// instance that reserved and the one that settles as the text below (backend::Reservations keeps
// it): every limit in full, so that a settlement does not depend on the rules of the moment.

#ifndef SLUICE_ENGINE_RESERVATION_H_
#define SLUICE_ENGINE_RESERVATION_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/engine.h"

namespace sluice::engine {

// What `taken` holds, as text (one line per item, keys in hex), and back; nullopt for text that
// is no reservation (or names a time zone this system does not have).
std::string EncodeReservation(const Refundable& taken);
std::optional<Refundable> DecodeReservation(std::string_view text);

// Of what `requests` (a batch) consumed, the items to settle: those whose descriptor took the
// request's cost (its hits_addend), not a cost of its own.
Refundable SettledPart(const Refundable& consumed, std::span<const Request> requests);

// A fresh reservation id: 128 random bits, in hex.
std::string NewReservationId();

}  // namespace sluice::engine

#endif  // SLUICE_ENGINE_RESERVATION_H_
