//! The shared part of Burn's `ModuleOps` and their helpers.

/// The `ModuleOps` methods whose text is the same for Burn 0.21 and 0.22, for each adapter's
/// `impl ModuleOps<Ascend> for Ascend` (the methods that differ stand beside the invocation).
#[macro_export]
macro_rules! adapter_module_ops {
    () => {
        fn deform_conv2d(
            x: FloatTensor<Ascend>,
            offset: FloatTensor<Ascend>,
            weight: FloatTensor<Ascend>,
            mask: Option<FloatTensor<Ascend>>,
            bias: Option<FloatTensor<Ascend>>,
            options: DeformConvOptions<2>,
        ) -> FloatTensor<Ascend> {
            let geometry = deform_geometry(&options);
            run(
                "deform_conv2d",
                deform::deform_conv2d(
                    &x,
                    &offset,
                    &weight,
                    mask.as_deref(),
                    bias.as_deref(),
                    &geometry,
                ),
            )
        }

        fn deform_conv2d_backward(
            x: FloatTensor<Ascend>,
            offset: FloatTensor<Ascend>,
            weight: FloatTensor<Ascend>,
            mask: Option<FloatTensor<Ascend>>,
            bias: Option<FloatTensor<Ascend>>,
            output_grad: FloatTensor<Ascend>,
            options: DeformConvOptions<2>,
        ) -> DeformConv2dBackward<Ascend> {
            let geometry = deform_geometry(&options);
            let g = run(
                "deform_conv2d_backward",
                deform::deform_conv2d_backward(
                    &x,
                    &offset,
                    &weight,
                    mask.as_deref(),
                    bias.is_some(),
                    &output_grad,
                    &geometry,
                ),
            );
            DeformConv2dBackward::new(
                g.x.into(),
                g.offset.into(),
                g.weight.into(),
                g.mask.map(Into::into),
                g.bias.map(Into::into),
            )
        }

        fn conv_transpose1d(
            x: FloatTensor<Ascend>,
            weight: FloatTensor<Ascend>,
            bias: Option<FloatTensor<Ascend>>,
            options: ConvTransposeOptions<1>,
        ) -> FloatTensor<Ascend> {
            convolve(x, weight, bias, transpose_params(&options))
        }

        fn conv_transpose1d_x_backward(
            weight: FloatTensor<Ascend>,
            output_grad: FloatTensor<Ascend>,
            options: ConvTransposeOptions<1>,
        ) -> FloatTensor<Ascend> {
            transpose_input_grad(weight, output_grad, transpose_params(&options))
        }

        fn conv_transpose1d_weight_backward(
            x: FloatTensor<Ascend>,
            weight: FloatTensor<Ascend>,
            output_grad: FloatTensor<Ascend>,
            options: ConvTransposeOptions<1>,
        ) -> FloatTensor<Ascend> {
            conv_grad(x, weight, output_grad, transpose_params(&options), WEIGHT)
        }

        fn conv_transpose2d(
            x: FloatTensor<Ascend>,
            weight: FloatTensor<Ascend>,
            bias: Option<FloatTensor<Ascend>>,
            options: ConvTransposeOptions<2>,
        ) -> FloatTensor<Ascend> {
            convolve(x, weight, bias, transpose_params(&options))
        }

        fn conv_transpose2d_x_backward(
            weight: FloatTensor<Ascend>,
            output_grad: FloatTensor<Ascend>,
            options: ConvTransposeOptions<2>,
        ) -> FloatTensor<Ascend> {
            transpose_input_grad(weight, output_grad, transpose_params(&options))
        }

        fn conv_transpose2d_weight_backward(
            x: FloatTensor<Ascend>,
            weight: FloatTensor<Ascend>,
            output_grad: FloatTensor<Ascend>,
            options: ConvTransposeOptions<2>,
        ) -> FloatTensor<Ascend> {
            conv_grad(x, weight, output_grad, transpose_params(&options), WEIGHT)
        }

        fn conv_transpose3d(
            x: FloatTensor<Ascend>,
            weight: FloatTensor<Ascend>,
            bias: Option<FloatTensor<Ascend>>,
            options: ConvTransposeOptions<3>,
        ) -> FloatTensor<Ascend> {
            convolve(x, weight, bias, transpose_params(&options))
        }

        fn conv_transpose3d_x_backward(
            weight: FloatTensor<Ascend>,
            output_grad: FloatTensor<Ascend>,
            options: ConvTransposeOptions<3>,
        ) -> FloatTensor<Ascend> {
            transpose_input_grad(weight, output_grad, transpose_params(&options))
        }

        fn conv_transpose3d_weight_backward(
            x: FloatTensor<Ascend>,
            weight: FloatTensor<Ascend>,
            output_grad: FloatTensor<Ascend>,
            options: ConvTransposeOptions<3>,
        ) -> FloatTensor<Ascend> {
            conv_grad(x, weight, output_grad, transpose_params(&options), WEIGHT)
        }

        fn avg_pool2d(
            x: FloatTensor<Ascend>,
            kernel_size: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            count_include_pad: bool,
            ceil_mode: bool,
        ) -> FloatTensor<Ascend> {
            let p = pool2d(kernel_size, stride, padding, [1, 1], ceil_mode);
            run("avg_pool2d", pool::avg_pool2d(&x, &p, count_include_pad))
        }

        fn avg_pool2d_backward(
            x: FloatTensor<Ascend>,
            grad: FloatTensor<Ascend>,
            kernel_size: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            count_include_pad: bool,
            ceil_mode: bool,
        ) -> FloatTensor<Ascend> {
            let p = pool2d(kernel_size, stride, padding, [1, 1], ceil_mode);
            run(
                "avg_pool2d_backward",
                pool::avg_pool2d_backward(&x, &grad, &p, count_include_pad),
            )
        }

        fn adaptive_avg_pool2d(
            x: FloatTensor<Ascend>,
            output_size: [usize; 2],
        ) -> FloatTensor<Ascend> {
            run(
                "adaptive_avg_pool2d",
                resample::resample(&x, output_size, Resample::AdaptiveAverage, false),
            )
        }

        fn adaptive_avg_pool2d_backward(
            x: FloatTensor<Ascend>,
            grad: FloatTensor<Ascend>,
        ) -> FloatTensor<Ascend> {
            run(
                "adaptive_avg_pool2d_backward",
                resample::resample_backward(&grad, spatial(&x), Resample::AdaptiveAverage, false),
            )
        }

        fn max_pool2d(
            x: FloatTensor<Ascend>,
            kernel_size: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            dilation: [usize; 2],
            ceil_mode: bool,
        ) -> FloatTensor<Ascend> {
            let p = pool2d(kernel_size, stride, padding, dilation, ceil_mode);
            run("max_pool2d", pool::max_pool2d(&x, &p))
        }

        fn max_pool2d_with_indices_backward(
            x: FloatTensor<Ascend>,
            _kernel_size: [usize; 2],
            _stride: [usize; 2],
            _padding: [usize; 2],
            _dilation: [usize; 2],
            _ceil_mode: bool,
            output_grad: FloatTensor<Ascend>,
            indices: IntTensor<Ascend>,
        ) -> MaxPool2dBackward<Ascend> {
            MaxPool2dBackward::new(run(
                "max_pool2d_with_indices_backward",
                pool::max_pool2d_backward(&x, &output_grad, &indices),
            ))
        }

        fn interpolate(
            x: FloatTensor<Ascend>,
            output_size: [usize; 2],
            options: InterpolateOptions,
        ) -> FloatTensor<Ascend> {
            let mode = resample_mode(&options.mode);
            run(
                "interpolate",
                resample::resample(&x, output_size, mode, options.align_corners),
            )
        }

        fn interpolate_backward(
            x: FloatTensor<Ascend>,
            grad: FloatTensor<Ascend>,
            _output_size: [usize; 2],
            options: InterpolateOptions,
        ) -> FloatTensor<Ascend> {
            let mode = resample_mode(&options.mode);
            run(
                "interpolate_backward",
                resample::resample_backward(&grad, spatial(&x), mode, options.align_corners),
            )
        }

        fn attention(
            query: FloatTensor<Ascend>,
            key: FloatTensor<Ascend>,
            value: FloatTensor<Ascend>,
            mask: Option<BoolTensor<Ascend>>,
            attn_bias: Option<FloatTensor<Ascend>>,
            options: AttentionModuleOptions,
        ) -> FloatTensor<Ascend> {
            if let Some(cap) = options.softcap {
                if cap.is_nan() || cap <= 0.0 {
                    raise(AscendError::invalid(
                        "attention",
                        format!("softcap must be positive, got {cap}"),
                    ));
                }
            }
            let options = AttentionOptions {
                scale: options.scale,
                softcap: options.softcap,
                is_causal: options.is_causal,
            };
            if flash_attention::fits(&query, &key, &value, attn_bias.is_some(), options.softcap) {
                let out = flash_attention::flash_attention(
                    &query,
                    &key,
                    &value,
                    mask.as_deref(),
                    options,
                );
                return run("attention", out.map(|(out, _)| out));
            }
            run(
                "attention",
                attention::attention(
                    &query,
                    &key,
                    &value,
                    mask.as_deref(),
                    attn_bias.as_deref(),
                    options,
                ),
            )
        }
    };
}

/// The helpers of both adapters' `ModuleOps` whose text is the same for Burn 0.21 and 0.22
/// (convolution and pooling parameters, gradients through transposed convolutions), for
/// each adapter's `module` module.
#[macro_export]
macro_rules! adapter_module_helpers {
    () => {
        /// `t` with size-1 dims prepended up to `rank` (a view), as Burn broadcasts module parameters.
        fn leading_ones(t: FloatTensor<Ascend>, rank: usize) -> FloatTensor<Ascend> {
            let mut dims = vec![1; rank.saturating_sub(t.shape().len())];
            dims.extend_from_slice(t.shape());
            Ascend::float_reshape(t, Shape::from(dims))
        }

        fn transpose_params<const N: usize>(o: &ConvTransposeOptions<N>) -> ConvParams {
            ConvParams {
                stride: o.stride.to_vec(),
                padding: o.padding.to_vec(),
                dilation: o.dilation.to_vec(),
                output_padding: o.padding_out.to_vec(),
                groups: o.groups,
                transposed: true,
            }
        }

        fn convolve(
            x: AscendTensor,
            weight: AscendTensor,
            bias: Option<AscendTensor>,
            params: ConvParams,
        ) -> AscendTensor {
            run(
                "convolution",
                conv::conv(&x, &weight, bias.as_deref(), &params),
            )
        }

        /// One gradient of a convolution through aclnnConvolutionBackward.
        fn conv_grad(
            x: AscendTensor,
            weight: AscendTensor,
            grad: AscendTensor,
            params: ConvParams,
            want: ConvGrads,
        ) -> AscendTensor {
            let grads = run(
                "convolution backward",
                conv::conv_backward(&x, &weight, &grad, &params, want),
            );
            let index = if want.input { 0 } else { 1 };
            grads.into_iter().nth(index).flatten().expect("requested")
        }

        /// The input gradient of a transposed convolution.
        fn transpose_input_grad(
            weight: AscendTensor,
            grad: AscendTensor,
            params: ConvParams,
        ) -> AscendTensor {
            run(
                "transposed convolution input gradient",
                conv::transposed_input_grad(&weight, &grad, &params),
            )
        }

        fn pool2d(
            kernel: [usize; 2],
            stride: [usize; 2],
            padding: [usize; 2],
            dilation: [usize; 2],
            ceil_mode: bool,
        ) -> Pool2d {
            Pool2d {
                kernel,
                stride,
                padding,
                dilation,
                ceil_mode,
            }
        }

        fn spatial(x: &AscendTensor) -> [usize; 2] {
            [x.shape()[2], x.shape()[3]]
        }

        fn deform_geometry(o: &DeformConvOptions<2>) -> deform::DeformGeometry {
            deform::DeformGeometry {
                stride: o.stride,
                padding: o.padding,
                dilation: o.dilation,
                weight_groups: o.weight_groups,
                offset_groups: o.offset_groups,
            }
        }
    };
}
