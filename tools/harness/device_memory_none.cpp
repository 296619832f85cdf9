#include "core/error.h"
#include "device_memory.h"

namespace flashattn::harness {

DeviceBuffer::DeviceBuffer(size_t, int) {
  fail(Status::unsupported, "device: this build has no CUDA support");
}
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept = default;
void DeviceBuffer::upload(const void*) {}
void DeviceBuffer::download(void*) const {}
void device_synchronize(int) {}

}  // namespace flashattn::harness
