/* How the kernels report errors. kernels/ is a leaf (it knows nothing of src/), so a kernel reports
 * through the reporter its user installs (kern_set_reporter; src/device routes it to mp_errorf and
 * mp_abortf, which name the rank and abort the whole MPI job). With none installed: a line on stderr,
 * and exit(1) for a fatal error. KERN_OK and KERN_ERR have the values of MP_OK and MP_ERR. Plain C,
 * included by the .cu files too. */
#ifndef MP_KERN_CHECK_H
#define MP_KERN_CHECK_H

#define KERN_OK 0
#define KERN_ERR (-1)

#ifdef __cplusplus
extern "C" {
#endif

/* fatal: the reporter must not return (it ends the job). msg is the formatted message. */
typedef void (*kern_report_fn)(int fatal, const char *file, int line, const char *msg);
void kern_set_reporter(kern_report_fn fn);

void kern_errorf(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void kern_abortf(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4), noreturn))
#endif
    ;

#ifdef __cplusplus
}
#endif

#define KERN_ERROR(...) kern_errorf(__FILE__, __LINE__, __VA_ARGS__)
#define KERN_ABORT(...) kern_abortf(__FILE__, __LINE__, __VA_ARGS__)
/* Report and evaluate to KERN_ERR: `return KERN_FAIL("bad %s", x);` */
#define KERN_FAIL(...) (kern_errorf(__FILE__, __LINE__, __VA_ARGS__), KERN_ERR)

#endif
