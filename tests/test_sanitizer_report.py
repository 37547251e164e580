"""ci/sanitizer_report.py on logs in compute-sanitizer's formats (as run 24 recorded them on the H200)."""

from __future__ import annotations

from ci import sanitizer_report

INITCHECK = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 2 bytes
=========     at void visdet_ops::<unnamed>::deform_conv_col2im_kernel<__half, float, (bool)1>(const T1 *, long)+0x3ae0
=========     by thread (96,0,0) in block (49,0,0)
=========     Address 0x7f0baf8bab40
=========
========= Uninitialized __global__ memory read of size 2 bytes
=========     at void cudnn::engines_precompiled::nhwcToNchwKernel<__nv_bfloat16, __nv_bfloat16, float>(T1)+0x1a0
=========     by thread (1,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 2 errors
"""

RACECHECK = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Read access at nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN+0x2c40
=========     and Write access at nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN+0x3d10 [48 hazards]
=========
========= Error: Race reported between Write access at void visdet_ops::k<float>(float *)+0x10
=========     and Read access at void visdet_ops::k<float>(float *)+0x20 [4 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)
"""


def test_kernel_names_lose_offset_and_arguments_but_keep_template_parentheses():
    assert sanitizer_report.kernel_name("void ns::k<T, (bool)1>(const T1 *, long)+0x3ae0") == "void ns::k<T, (bool)1>"
    assert sanitizer_report.kernel_name("nvjet_sm90_tst_8x64_v_bz_TNN+0x2c40") == "nvjet_sm90_tst_8x64_v_bz_TNN"


def test_initcheck_reports_are_attributed_and_vendor_kernels_do_not_count():
    report = sanitizer_report.parse(INITCHECK)
    assert report.summarised == report.printed == 2
    assert list(report.counted) == ["void visdet_ops::<unnamed>::deform_conv_col2im_kernel<__half, float, (bool)1>"]
    cudnn = "void cudnn::engines_precompiled::nhwcToNchwKernel<__nv_bfloat16, __nv_bfloat16, float>"
    assert list(report.vendor) == [cudnn]
    assert len(report.problems()) == 1


def test_racecheck_hazards_inside_cublas_are_listed_not_counted():
    report = sanitizer_report.parse(RACECHECK)
    assert report.summarised == report.printed == 2
    assert report.vendor == {"nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN": 1}
    assert report.counted == {"void visdet_ops::k<float>": 1}


def test_a_clean_log_passes_and_an_unfinished_or_truncated_one_fails(tmp_path):
    clean = tmp_path / "clean.log"
    clean.write_text("========= COMPUTE-SANITIZER\nsweep done\n========= ERROR SUMMARY: 0 errors\n")
    assert sanitizer_report.main([str(clean)]) == 0
    cut = tmp_path / "cut.log"
    cut.write_text("========= COMPUTE-SANITIZER\n")  # killed by a timeout: no summary
    assert sanitizer_report.main([str(cut)]) == 1
    truncated = tmp_path / "truncated.log"
    truncated.write_text(
        INITCHECK.replace("ERROR SUMMARY: 2 errors", "ERROR SUMMARY: 5 errors")
        + "========= ERROR SUMMARY: 3 errors were not printed. Use --print-limit option to adjust\n"
    )
    report = sanitizer_report.parse(truncated.read_text())
    assert report.summarised == 5 and report.printed == 2
    assert any("--print-limit 0" in p for p in report.problems())


def test_an_error_without_a_kernel_frame_counts_as_host_side():
    report = sanitizer_report.parse(
        "========= COMPUTE-SANITIZER\n"
        "========= Program hit cudaErrorInvalidValue (error 1) on CUDA API call to cudaMemcpy.\n"
        "=========     Saved host backtrace up to driver entry point at error\n"
        "========= Error: Target application terminated before first instrumented API call\n"
        "========= ERROR SUMMARY: 1 error\n"
    )
    assert sum(report.counted.values()) == 2
    assert all(k.startswith("(host: ") for k in report.counted)
