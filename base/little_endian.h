// Little-endian integers in wire bytes: one load or store on a
// little-endian host. For the frame prefix, bulk descriptors and TCP's bulk
// headers.
#ifndef RDMARPC_BASE_LITTLE_ENDIAN_H_
#define RDMARPC_BASE_LITTLE_ENDIAN_H_

#include <bit>
#include <cstddef>
#include <cstring>

namespace rdmarpc {

template <typename T>
void PutLe(std::byte* out, T value) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out, &value, sizeof(T));
  } else {
    for (size_t i = 0; i < sizeof(T); ++i) {
      out[i] = std::byte(value >> (8 * i));
    }
  }
}

template <typename T>
T GetLe(const std::byte* in) {
  T value = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&value, in, sizeof(T));
  } else {
    for (size_t i = 0; i < sizeof(T); ++i) {
      value |= static_cast<T>(std::to_integer<T>(in[i]) << (8 * i));
    }
  }
  return value;
}

}  // namespace rdmarpc

#endif  // RDMARPC_BASE_LITTLE_ENDIAN_H_
