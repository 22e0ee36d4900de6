"""compute-sanitizer / CUDA-MEMCHECK text reports (forensics/parsers/sanitizer/text.py,
grammars/compute_sanitizer.lark): the older record forms, a marker that starts
mid-line, a report cut at the end of a paste, host frames read into events.Frame
fields and the frame that called a failing API.  Every report here is hand-made in the
printed shape of the issue it cites (other names, addresses and paths).
"""

from __future__ import annotations

from forensics.events import Frame, Kind, Severity
from forensics.parsers.sanitizer.text import is_sanitizer_line
from tests.helpers import parse_text


def findings(parsed, report: str):
    return [e for e in parsed.events if e.kind == Kind.SANITIZER and e.attrs.get("report") == report]


def accounted(parsed) -> bool:
    return parsed.event_lines + parsed.noise_lines + parsed.counted_lines + parsed.unparsed_lines == parsed.lines


# the shape of https://github.com/llnl/Quicksilver/issues/48 (CUDA-MEMCHECK: no "bytes"
# after the size, "at 0xPC in func", the old "Device Frame:" and "Host Frame:" forms)
def test_cuda_memcheck_record_with_a_device_frame():
    parsed = parse_text("========= Invalid __global__ write of size 4\n"
                        "=========     at 0x00000150 in accumulate(Grid*, int)\n"
                        "=========     by thread (31,0,0) in block (7,0,0)\n"
                        "=========     Address 0x7f2a10000010 is out of bounds\n"
                        "=========     Device Frame:stepKernel(Grid*, int) (stepKernel(Grid*, int) : 0x88)\n"
                        "=========     Saved host backtrace up to driver entry point at kernel launch time\n"
                        "=========     Host Frame:/usr/lib64/libcuda.so.1 (cuLaunchKernel + 0x2b8) [0x1f4a8]\n"
                        "=========     Host Frame:./sim [0x12ab4]\n"
                        "=========\n")
    (access,) = findings(parsed, "access")
    a = access.attrs
    assert a["fault"] == "Invalid __global__ write of size 4"
    # the PC is in a device function; the outermost device frame is the launched kernel
    assert (a["kernel"], a["kernel_signature"], a["device_function"]) == ("stepKernel", "stepKernel(Grid*, int)",
                                                                          "accumulate")
    assert a["host_stack"] == (Frame("/usr/lib64/libcuda.so.1", None, "cuLaunchKernel"), Frame("./sim", None, None))
    assert a["host_frames"] == ["/usr/lib64/libcuda.so.1 (cuLaunchKernel + 0x2b8) [0x1f4a8]", "./sim [0x12ab4]"]
    assert parsed.unparsed_lines == 0 and accounted(parsed)


def test_a_template_argument_in_a_device_frame_is_part_of_its_name():
    parsed = parse_text("========= Invalid __shared__ read of size 8 bytes\n"
                        "=========     at void blk::Reduce<float, (int)128>::Apply(float)+0x40 in reduce.cuh:77\n"
                        "=========     by thread (0,0,0) in block (0,0,0)\n"
                        "=========     Address 0x10 is misaligned\n"
                        "=========     Device Frame:void blk::Reduce<float, (int)128>::Sum<(bool)1>(float)+0x90 in "
                        "reduce.cuh:91\n"
                        "=========\n")
    (access,) = findings(parsed, "access")
    assert access.attrs["kernel"] == "blk::Reduce<float, (int)128>::Sum<(bool)1>"
    assert parsed.unparsed_lines == 0


# the shape of https://github.com/Dao-AILab/flash-attention/pull/2090 (pytest prints the
# test file's path, and the tool's first line goes on after it)
def test_a_marker_that_starts_mid_line():
    parsed = parse_text("tests/test_attn.py ========= Invalid __global__ read of size 2 bytes\n"
                        "=========     at attn_fwd_kernel+0x1b40 in attn.py:88\n"
                        "=========     by thread (64,0,0) in block (3,0,0)\n"
                        "=========     Access to 0x7f0010000c00 is out of bounds\n"
                        "=========     Saved host backtrace up to driver entry point at kernel launch time\n"
                        "=========         Host Frame: _attn_fwd in interface.py:201\n"
                        "=========\n")
    (access,) = findings(parsed, "access")
    assert (access.line, access.attrs["kernel"], access.attrs["launch_site"]) == (1, "attn_fwd_kernel",
                                                                                 "_attn_fwd in interface.py:201")


def test_a_mid_line_marker_needs_a_headline_after_it():
    assert is_sanitizer_line("pytest x.py ========= Program hit cudaErrorInvalidValue (error 1) due to "
                             '"invalid argument" on CUDA API call to cudaMemcpy.', False)
    assert not is_sanitizer_line("loss ========= 0.5", True)
    assert not is_sanitizer_line("=========== ========= Invalid __global__ read of size 4 bytes", False)
    assert not is_sanitizer_line("step 3 ========= done", False)


def test_a_report_cut_at_the_end_is_kept_as_partial():
    parsed = parse_text("========= Invalid __global__ read of size 4 bytes\n"
                        "=========     at gather_kernel(float const*, int)+0x90 in gather.cu:12\n"
                        "=========     by thread (5,0,0) in block (1,0,0)\n"
                        "=========     Address 0x7f0000000040 is out of bounds\n"
                        "=========     Saved host backtrace up to driver entry point at kernel launch time\n"
                        "=========         Host Frame: launch_gather in gather.cu:40 [0x1c2] in libgather.so\n"
                        "=========         Host Fra")
    (access,) = findings(parsed, "access")
    assert access.attrs["partial"] is True and access.attrs["kernel"] == "gather_kernel"
    assert access.attrs["launch_site"] == "launch_gather in gather.cu:40"
    assert parsed.unparsed_lines == 1 and accounted(parsed)
    assert any("cut mid-line" in p for p in parsed.problems)


# the shape of https://github.com/NVIDIA/cudf-spark-jni/issues/1745 (a JNI function calls
# the failing API; 5-space host frames with their module on the next line)
def test_the_frame_that_called_a_failing_api():
    parsed = parse_text('========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" '
                        "on CUDA API call to cudaStreamSynchronize.\n"
                        "=========     Saved host backtrace up to driver entry point at error\n"
                        "=========     Host Frame: [0x3a1b2c]\n"
                        "=========                in /usr/lib64/libcuda.so.1\n"
                        "=========     Host Frame: [0x1f00aa]\n"
                        "=========                in /tmp/libnative8121.so\n"
                        "=========     Host Frame:Java_org_example_Native_sync [0x9a0b1c]\n"
                        "=========                in /tmp/libnative8121.so\n"
                        "=========     Host Frame: [0xffffffffe0001234]\n"
                        "=========                in \n"
                        "=========\n")
    (api,) = findings(parsed, "api_error")
    a = api.attrs
    assert (a["api"], a["error_code"], a["error_name"], api.severity) == (
        "cudaStreamSynchronize", 719, "cudaErrorLaunchFailure", Severity.ERROR)
    assert a["api_caller"] == Frame("/tmp/libnative8121.so", None, "Java_org_example_Native_sync")
    assert a["host_frames"][2] == "Java_org_example_Native_sync [0x9a0b1c] in /tmp/libnative8121.so"
    assert parsed.unparsed_lines == 0 and accounted(parsed)


# the shape of https://github.com/gkeyllorg/gkeyll/issues/962 (NCCL's kernel set-up asks for
# attributes; the report is cut inside its second frame)
def test_a_non_sticky_api_error_is_a_warning_with_its_caller():
    parsed = parse_text('========= Program hit cudaErrorNoKernelImageForDevice (error 209) due to "no kernel image '
                        'is available for execution on the device" on CUDA API call to cudaFuncGetAttributes.\n'
                        "=========     Saved host backtrace up to driver entry point at error\n"
                        "=========         Host Frame: ncclSetupKernels(int, int) in enqueue.cc:61 [0x7a1b2] in "
                        "libnccl.so.2\n"
                        "=========         Host Fr")
    (api,) = findings(parsed, "api_error")
    assert api.severity == Severity.WARNING and api.attrs["cuda_error"].code == 209
    assert api.attrs["api_caller"] == Frame("enqueue.cc", 61, "ncclSetupKernels")
    assert api.attrs["partial"] is True


def test_an_entry_point_lookup_is_probing():
    parsed = parse_text('========= Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to "invalid argument" on CUDA '
                        "API call to cuGetProcAddress_v2.\n"
                        "=========     Saved host backtrace up to driver entry point at error\n"
                        "=========         Host Frame:  [0xd4a2] in cydriver.cpython-312-x86_64-linux-gnu.so\n"
                        "=========\n")
    (api,) = findings(parsed, "api_error")
    assert api.severity == Severity.INFO and api.attrs["api"] == "cuGetProcAddress_v2"
    assert "api_caller" not in api.attrs


def test_python_and_native_host_frames_are_read():
    parsed = parse_text("========= Invalid __global__ write of size 4 bytes\n"
                        "=========     at scatter_kernel(int*, int)+0x70 in scatter.cu:9\n"
                        "=========     by thread (0,0,0) in block (0,0,0)\n"
                        "=========     Address 0x7f0000000000 is out of bounds\n"
                        "=========     Saved host backtrace up to driver entry point at kernel launch time\n"
                        "=========         Host Frame: cudaLaunchKernel [0x6bedb] in libcudart.so.12\n"
                        "=========         Host Frame: op_scatter(at::Tensor&) [clone .isra.0] in ops.cpp:31 "
                        "[0x51c2] in libops.so\n"
                        "=========         Host Frame: <lambda> in <string>:3\n"
                        "=========\n")
    (access,) = findings(parsed, "access")
    assert access.attrs["host_stack"] == (Frame("libcudart.so.12", None, "cudaLaunchKernel"),
                                          Frame("ops.cpp", 31, "op_scatter"), Frame("<string>", 3, "<lambda>"))
    assert access.attrs["launch_site"] == "op_scatter(at::Tensor&) [clone .isra.0] in ops.cpp:31"
