// GSSAPI stubs for the static link of libzmq.a.
//
// Debian's libzmq is built with GSSAPI support, so libzmq.a references
// gss_* symbols, but Debian ships no static libgssapi_krb5. The interpreter
// never enables the GSSAPI security mechanism (its sockets are plain TCP on
// loopback, authenticated by the messages' HMAC), so these are never called;
// should one be, it fails cleanly with GSS_S_UNAVAILABLE.
#include <cstdint>

extern "C" {

typedef uint32_t OM_uint32;
typedef void* gss_OID;
#define GSS_S_UNAVAILABLE (16ul << 16)

#define AIRLOCK_GSS_STUB(name)                      \
  OM_uint32 name(OM_uint32* minor, ...) {           \
    if (minor) *minor = 0;                          \
    return static_cast<OM_uint32>(GSS_S_UNAVAILABLE); \
  }

AIRLOCK_GSS_STUB(gss_release_name)
AIRLOCK_GSS_STUB(gss_release_buffer)
AIRLOCK_GSS_STUB(gss_delete_sec_context)
AIRLOCK_GSS_STUB(gss_release_cred)
AIRLOCK_GSS_STUB(gss_import_name)
AIRLOCK_GSS_STUB(gss_wrap)
AIRLOCK_GSS_STUB(gss_unwrap)
AIRLOCK_GSS_STUB(gss_init_sec_context)
AIRLOCK_GSS_STUB(gss_display_name)
AIRLOCK_GSS_STUB(gss_acquire_cred)
AIRLOCK_GSS_STUB(gss_accept_sec_context)

gss_OID GSS_C_NT_USER_NAME = nullptr;
gss_OID GSS_C_NT_HOSTBASED_SERVICE = nullptr;

}  // extern "C"
